"""Write the current-schema files from the migrations: a fresh database of each dialect is
migrated now and read back (`store/sqlite/introspect.py`, `store/postgres/introspect.py`).

    python scripts/schema.py [--dialect sqlite|postgres]     (or: make schema)

PostgreSQL comes from pgserver (the `postgres` extra), in a temporary directory of its own.
`tests/store/test_schema.py` fails while a file differs from what this writes.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
from pathlib import Path

from stratamem.store.postgres import introspect as pg_introspect
from stratamem.store.sqlite import introspect as sqlite_introspect
from stratamem.store.sqlite.store import SqliteStore

SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "schema"
FILES = {"sqlite": SCHEMA / "sqlite.sql", "postgres": SCHEMA / "postgres.sql"}


def sqlite_schema(root: Path) -> str:
    SqliteStore(root / "fresh.db").close()
    with sqlite3.connect(root / "fresh.db") as conn:
        return sqlite_introspect.schema_sql(conn)


def postgres_schema(root: Path) -> str:
    import pgserver  # noqa: PLC0415 - the postgres extra
    import psycopg  # noqa: PLC0415

    from stratamem.store.postgres.store import PostgresStore  # noqa: PLC0415

    server = pgserver.get_server(root, cleanup_mode="stop")
    try:
        url = str(server.get_uri())
        PostgresStore(url).close()
        with psycopg.connect(url, autocommit=True) as conn:
            return pg_introspect.schema_sql(conn)
    finally:
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dialect", choices=sorted(FILES), action="append")
    args = parser.parse_args()
    for dialect in args.dialect or sorted(FILES):
        root = Path(tempfile.mkdtemp(prefix="stratamem-schema-"))
        try:
            text = sqlite_schema(root) if dialect == "sqlite" else postgres_schema(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        FILES[dialect].write_text(text)
        print(f"{FILES[dialect]}: {text.count(';')} statements")


if __name__ == "__main__":
    main()
