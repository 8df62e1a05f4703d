"""Applying the PostgreSQL schema's migrations on open, recorded in `schema_migrations`.

The whole run holds a session advisory lock, so two processes opening a new database at once
do not both migrate: the second waits, then finds every migration recorded.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from stratamem.errors import StoreError
from stratamem.store.migration import Migration
from stratamem.store.postgres.schema import MIGRATIONS

#: The advisory lock id of schema migrations ("stratamem" in ASCII, truncated to 63 bits).
MIGRATION_LOCK = 0x73747261746D656D


def migrate(
    conn: psycopg.Connection[Any], migrations: tuple[Migration, ...] = MIGRATIONS
) -> list[int]:
    """Apply the migrations not yet recorded, each in its own transaction; return those applied.
    `conn` is in autocommit mode."""
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
            " name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
        )
        done = {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
        newest_known = max(m.version for m in migrations)
        if done and max(done) > newest_known:
            raise StoreError(
                f"the store's schema is at version {max(done)}, newer than this stratamem "
                f"knows ({newest_known}): upgrade stratamem"
            )
        applied = []
        for migration in sorted(migrations, key=lambda m: m.version):
            if migration.version not in done:
                _apply(conn, migration)
                applied.append(migration.version)
        return applied
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _apply(conn: psycopg.Connection[Any], migration: Migration) -> None:
    try:
        with conn.transaction():
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                (migration.version, migration.name, time.time()),
            )
    except psycopg.Error as exc:
        raise StoreError(f"migration {migration.version} ({migration.name}) failed: {exc}") from exc
