"""What a SQLite store's schema is, read from the database itself: the current-schema file
(`docs/schema/sqlite.sql`, written by `scripts/schema.py`) and the columns the
dialect-parity test holds to PostgreSQL's.

The file is the schema a fresh database has after every migration, each table followed by its
indexes and triggers, in the text SQLite keeps (`sqlite_schema`): a migration that alters a
table shows in the table's own statement. FTS5's shadow tables and SQLite's automatic indexes
are left out (the virtual table and the constraint that made them are in).
"""

from __future__ import annotations

import sqlite3

from stratamem.store.schema_text import Column, file_text, meaning

_KINDS = ("table", "index", "trigger")


def schema_sql(conn: sqlite3.Connection) -> str:
    """The current-schema file's text for the database behind `conn`."""
    shadows = {str(row[1]) for row in conn.execute("PRAGMA table_list") if row[2] == "shadow"}
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema"
        " WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    statements = sorted(
        (str(tbl), _KINDS.index(str(kind)), str(name), str(sql).strip() + ";")
        for kind, name, tbl, sql in rows
        if tbl not in shadows
    )
    return file_text("SQLite", _migrations(conn), [s[3] for s in statements])


def _migrations(conn: sqlite3.Connection) -> list[tuple[int, str]]:
    return [
        (int(row[0]), str(row[1]))
        for row in conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
    ]


def columns(conn: sqlite3.Connection) -> dict[str, list[Column]]:
    """Each ordinary table's columns, in order (virtual and shadow tables are left out).

    A primary-key column counts as not null: SQLite lets a non-integer key hold NULL (a
    historical quirk), but no write of ours does, and PostgreSQL refuses it."""
    tables = [
        str(row[1])
        for row in conn.execute("PRAGMA table_list")
        if row[0] == "main" and row[2] == "table" and not str(row[1]).startswith("sqlite_")
    ]
    return {
        table: [
            Column(str(r[1]), meaning(str(r[2])), bool(r[3]) or r[5] > 0, _default(r[4]))
            for r in conn.execute(f"PRAGMA table_xinfo({table})")
        ]
        for table in sorted(tables)
    }


def _default(value: object) -> str | None:
    return None if value is None else str(value)
