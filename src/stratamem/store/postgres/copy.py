"""Copying an embedded (SQLite) store into PostgreSQL: `stratamem migrate`.

Every table the SQLite file has (but its full-text indexes and migration records) is copied
into the table of the same name, in row order, in batches: each batch is one PostgreSQL
transaction that also records how far its table got (`copy_progress`), and rows already there
are skipped, so an interrupted copy is finished by running it again. Row ids are kept (the
layers' marks and the failure records' order refer to them); vectors are copied as stored (no
re-embedding) and numbered anew; the text index and the pgvector rows are built per tenant at
the end (with a large tenant's HNSW index, `vector_index.py`). Then the rows of every table
are counted per tenant on both sides, and any difference is an error.

Stop every writer of the SQLite file first: rows written during the copy may be missed.

The target must be empty (a new database, or one that only this source's earlier, interrupted
copy wrote to): a database that already serves other tenants is refused before anything is
written (`TargetInUse`), since rows whose ids collide with its own would be skipped and the
copied tenants left half there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratamem.domain import Layer
from stratamem.errors import ConfigError, StoreError
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.store import PostgresStore

BATCH_ROWS = 1000
#: Columns only one side has: derived there, never copied.
_SKIPPED_COLUMNS = {"scope_token", "fts_len", "fts_dirty", "emb_seq"}
_PROGRESS_DDL = (
    "CREATE TABLE IF NOT EXISTS copy_progress (source TEXT NOT NULL, table_name TEXT NOT NULL,"
    " last_rowid BIGINT NOT NULL, PRIMARY KEY (source, table_name))"
)
Progress = Callable[[str, int], None]
#: Tables a freshly opened target may hold rows in before any tenant's data (the store's own
#: records), and the copy's own.
_NOT_TENANT_DATA = {"meta", "receipt_keys", "schema_migrations", "copy_progress"}


class TargetInUse(ConfigError):
    """`stratamem migrate` was pointed at a database that holds data already."""


@dataclass
class CopyReport:
    """Rows copied by this run per table, and the counts per table and tenant after it."""

    copied: dict[str, int] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"copied": self.copied, "counts": self.counts}


def copy_store(
    source: Path, target: PostgresStore, progress: Progress | None = None,
    max_batches: int | None = None,
) -> CopyReport:  # fmt: skip
    """Copy the SQLite store at `source` into `target` (resuming an earlier copy), then verify.
    `max_batches` stops early (to test resuming)."""
    if not source.is_file():
        raise StoreError(f"no SQLite store at {source}")
    lite = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        tables = _source_tables(lite)
        report = CopyReport()
        with target.writing() as conn:
            conn.execute(_PROGRESS_DDL)
        _refuse_a_used_target(target, str(source.resolve()), tables)
        budget = [max_batches]
        for table in tables:
            report.copied[table] = _copy_table(lite, target, str(source.resolve()), table, budget)
            if progress is not None:
                progress(table, report.copied[table])
            if budget[0] == 0:
                return report
        _index_text(lite, target)
        with target.writing() as conn:
            conn.execute("ANALYZE")  # plans for the copied sizes, not for empty tables
        report.counts = verify(lite, target, tables)
        return report
    finally:
        lite.close()


def _refuse_a_used_target(target: PostgresStore, source: str, tables: list[str]) -> None:
    """`TargetInUse` unless `target` holds no data, or only what this source's earlier copy
    wrote (its progress is recorded: running again finishes it)."""
    with target.reading() as conn:
        rows = conn.execute("SELECT DISTINCT source FROM copy_progress").fetchall()
        sources = {str(r[0]) for r in rows}
        if sources == {source}:
            return
        used = [t for t in tables if t not in _NOT_TENANT_DATA and _has_rows(conn, t)]
    if used or sources:
        what = f"rows in {', '.join(used)}" if used else f"a copy of {', '.join(sorted(sources))}"
        raise TargetInUse(
            f"the target database is not empty ({what}): stratamem migrate copies into an empty"
            " database only (a new one, or one an interrupted copy of this same source began);"
            " nothing was copied"
        )


def _has_rows(conn: PgConn, table: str) -> bool:
    exists = conn.execute("SELECT to_regclass(?)", (table,)).fetchone()
    if exists is None or exists[0] is None:
        return False  # (the copy then names the missing table)
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None


def _source_tables(lite: sqlite3.Connection) -> list[str]:
    rows = lite.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " AND name NOT LIKE '%_fts%' AND name <> 'schema_migrations' ORDER BY rowid"
    ).fetchall()
    names = [str(r[0]) for r in rows]
    # parents first: keys refer to tenants
    return sorted(names, key=lambda name: name == "api_keys")


def _copy_table(
    lite: sqlite3.Connection, target: PostgresStore, source: str, table: str,
    budget: list[int | None],
) -> int:  # fmt: skip
    columns, identity = _columns(lite, target, table)
    marks = ", ".join("?" for _ in columns)
    overriding = " OVERRIDING SYSTEM VALUE" if identity in columns else ""
    insert = (
        f"INSERT INTO {table} ({', '.join(columns)}){overriding} VALUES ({marks})"
        " ON CONFLICT DO NOTHING"
    )
    copied = 0
    while budget[0] is None or budget[0] > 0:
        with target.writing() as conn:
            last = _last_rowid(conn, source, table)
            rows = lite.execute(
                f"SELECT rowid, {', '.join(columns)} FROM {table} WHERE rowid > ?"
                " ORDER BY rowid LIMIT ?",
                (last, BATCH_ROWS),
            ).fetchall()
            if not rows:
                break
            conn.executemany(insert, [tuple(r[1:]) for r in rows])
            _after_batch(conn, table, identity, [r for r in rows])
            conn.execute(
                "INSERT INTO copy_progress (source, table_name, last_rowid) VALUES (?, ?, ?)"
                " ON CONFLICT (source, table_name) DO UPDATE SET last_rowid = excluded.last_rowid",
                (source, table, int(rows[-1][0])),
            )
        copied += len(rows)
        if budget[0] is not None:
            budget[0] -= 1
    return copied


def _columns(
    lite: sqlite3.Connection, target: PostgresStore, table: str
) -> tuple[list[str], str | None]:
    """The columns both sides have (in the source's order), and the target's identity column."""
    source_columns = [str(r[1]) for r in lite.execute(f"PRAGMA table_info({table})").fetchall()]
    with target.reading() as conn:
        rows = conn.execute(
            "SELECT column_name, is_identity FROM information_schema.columns"
            " WHERE table_name = ? AND table_schema = current_schema()",
            (table,),
        ).fetchall()
    if not rows:
        raise StoreError(f"PostgreSQL has no table {table!r}: is stratamem the same version?")
    target_columns = {str(r[0]) for r in rows}
    identity = next((str(r[0]) for r in rows if r[1] == "YES"), None)
    columns = [c for c in source_columns if c in target_columns and c not in _SKIPPED_COLUMNS]
    return columns, identity


def _last_rowid(conn: PgConn, source: str, table: str) -> int:
    row = conn.execute(
        "SELECT last_rowid FROM copy_progress WHERE source = ? AND table_name = ?",
        (source, table),
    ).fetchone()
    return 0 if row is None else int(row[0])


def _after_batch(conn: PgConn, table: str, identity: str | None, rows: list[Any]) -> None:
    """Number the copied vectors anew; move the identity past the copied ids."""
    if table in ("turns", "memories"):
        conn.execute(
            f"UPDATE {table} SET emb_seq = nextval('emb_seq')"
            " WHERE embedding IS NOT NULL AND emb_seq IS NULL"
        )
    if identity is not None:
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', '{identity}'),"
            f" GREATEST((SELECT max({identity}) FROM {table}), 1))"
        )


def _index_text(lite: sqlite3.Connection, target: PostgresStore) -> None:
    for layer, table in ((Layer.L0, "turns"), (Layer.L1, "memories")):
        for (tenant,) in lite.execute(f"SELECT DISTINCT tenant FROM {table}").fetchall():
            target.index_text(str(tenant), layer)
            target.vectors.index_tenant(str(tenant), layer)


def verify(
    lite: sqlite3.Connection, target: PostgresStore, tables: list[str]
) -> dict[str, dict[str, int]]:
    """Rows per table and tenant, equal on both sides (else `StoreError` naming the first
    difference)."""
    counts: dict[str, dict[str, int]] = {}
    for table in tables:
        columns = {str(r[1]) for r in lite.execute(f"PRAGMA table_info({table})").fetchall()}
        sql = (
            f"SELECT tenant, count(*) FROM {table} GROUP BY tenant"
            if "tenant" in columns
            else f"SELECT '*', count(*) FROM {table} HAVING count(*) > 0"
        )
        expected = {str(r[0]): int(r[1]) for r in lite.execute(sql).fetchall()}
        with target.reading() as conn:
            found = {str(r[0]): int(r[1]) for r in conn.execute(sql).fetchall()}
        if found != expected:
            raise StoreError(
                f"table {table}: PostgreSQL has {found} rows per tenant, SQLite {expected}"
            )
        counts[table] = expected
    return counts
