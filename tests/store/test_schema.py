"""The schema in one place per database, and the two databases' tables held to each other.

- `docs/schema/sqlite.sql` and `docs/schema/postgres.sql` are what a fresh database of each
  holds after every migration (written by `make schema`): the file cannot drift from the
  migrations unseen.
- Every table both databases have has the same columns, in the same order, with the same
  nullability, defaults and meaning of types, but for the columns named below, each with the
  reason it is one database's own.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from stratamem.store.schema_text import Column
from stratamem.store.sqlite import introspect as sqlite_introspect
from stratamem.store.sqlite.store import SqliteStore

if TYPE_CHECKING:
    from stratamem.store.postgres.store import PostgresStore

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema"
REMEDY = "the schema file differs from a freshly migrated database: run `make schema`"

#: Tables of one database only: PostgreSQL's text index and pgvector rows (SQLite's text index
#: is FTS5's virtual tables, its vectors are scanned from the records' own column).
POSTGRES_TABLES = {"turn_terms", "memory_terms", "text_totals", "turn_vectors",
                   "memory_vectors", "vector_marks", "vector_indexes"}  # fmt: skip
#: Columns of one database only, and why.
SQLITE_COLUMNS = {
    ("turns", "scope_token"),  # FTS5 indexes the tenant's token from the row
}
POSTGRES_COLUMNS = {
    ("turns", "fts_len"), ("turns", "fts_dirty"),  # the text index's length and catch-up mark
    ("memories", "fts_len"), ("memories", "fts_dirty"),
    # SQLite's tables have a rowid without naming one; these PostgreSQL tables name it, as the
    # shared queries order and page by it
    ("api_keys", "rowid"), ("receipt_keys", "rowid"), ("executions", "rowid"),
}  # fmt: skip


def _sqlite_conn(tmp_path: Path) -> sqlite3.Connection:
    SqliteStore(tmp_path / "fresh.db").close()
    return sqlite3.connect(tmp_path / "fresh.db")


def test_the_sqlite_schema_file_is_a_fresh_database(tmp_path: Path) -> None:
    with _sqlite_conn(tmp_path) as conn:
        fresh = sqlite_introspect.schema_sql(conn)
    assert fresh == (SCHEMA / "sqlite.sql").read_text(), REMEDY


@pytest.mark.postgres
def test_the_postgres_schema_file_is_a_fresh_database(fresh_store: PostgresStore) -> None:
    import psycopg  # noqa: PLC0415 - only with the postgres extra

    from stratamem.store.postgres import introspect  # noqa: PLC0415

    with psycopg.connect(fresh_store.url, autocommit=True) as conn:
        fresh = introspect.schema_sql(conn)
    assert fresh == (SCHEMA / "postgres.sql").read_text(), REMEDY


@pytest.mark.postgres
def test_both_databases_hold_the_same_columns(fresh_store: PostgresStore, tmp_path: Path) -> None:
    import psycopg  # noqa: PLC0415

    from stratamem.store.postgres import introspect  # noqa: PLC0415

    with _sqlite_conn(tmp_path) as conn:
        lite = sqlite_introspect.columns(conn)
    with psycopg.connect(fresh_store.url, autocommit=True) as conn:
        pg = introspect.columns(conn)
    assert set(pg) - set(lite) == POSTGRES_TABLES
    assert set(lite) - set(pg) == set()
    for table in sorted(lite):
        assert _shared(table, lite[table], SQLITE_COLUMNS) == _shared(
            table, pg[table], POSTGRES_COLUMNS
        ), table
    assert {(t, c.name) for t, cols in lite.items() for c in cols} >= SQLITE_COLUMNS
    assert {(t, c.name) for t, cols in pg.items() for c in cols} >= POSTGRES_COLUMNS


def _shared(table: str, columns: list[Column], own: set[tuple[str, str]]) -> list[Column]:
    return [c for c in columns if (table, c.name) not in own]
