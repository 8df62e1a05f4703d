"""`stratamem migrate`: copy an embedded store into PostgreSQL (`store/postgres/copy.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from stratamem.cli.common import print_json
from stratamem.errors import ConfigError
from stratamem.store.opening import POSTGRES_SCHEMES, SQLITE_SCHEME


@click.command("migrate")
@click.option("--from", "source", required=True, help="The embedded store: sqlite:PATH.")
@click.option("--to", "target", required=True, help="The PostgreSQL store: postgresql://…")
def migrate(source: str, target: str) -> None:
    """Copy a SQLite store into PostgreSQL (vectors included), verify the rows per tenant and
    table; run it again to finish an interrupted copy. Stop the SQLite store's writers first.
    The target must be an empty database: one that holds data already is refused (exit 5)."""
    if not source.startswith(SQLITE_SCHEME):
        raise ConfigError(f"--from must be sqlite:PATH, not {source!r}")
    if not target.startswith(POSTGRES_SCHEMES):
        raise ConfigError("--to must be a postgresql:// URL")
    from stratamem.store.postgres import PostgresStore  # noqa: PLC0415 - the postgres extra
    from stratamem.store.postgres.copy import copy_store  # noqa: PLC0415

    store = PostgresStore(target)
    try:
        report = copy_store(
            Path(source.removeprefix(SQLITE_SCHEME)),
            store,
            progress=lambda table, rows: click.echo(f"{table}: {rows} rows copied", err=True),
        )
    finally:
        store.close()
    print_json(report.to_json())
