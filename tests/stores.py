"""The store implementations the contract suites run against: a SQLite file, and PostgreSQL
from `pgserver` (one server per test session in its own temporary directory; one schema,
migrated once and emptied before each test).

A suite asks for `open_store` (a function opening the store, again and again, on the same
data); the PostgreSQL variant is marked `postgres`, so CI fails when it cannot run.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from stratamem.store.opening import RecordStore, open_url

StoreFactory = Callable[[], RecordStore]
KINDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
_SCHEMA = "stratamem_test"
_MIGRATED: dict[str, str] = {}


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL server, for the whole test session (its data in a
    temporary directory of its own: pytest's are closed to the server's system user)."""
    pgserver = pytest.importorskip("pgserver")
    root = Path(tempfile.mkdtemp(prefix="stratamem-pg-"))
    server = pgserver.get_server(root, cleanup_mode="stop")
    try:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):  # a test server
            server.psql(f"ALTER SYSTEM SET {setting} = off;")
        server.psql("SELECT pg_reload_conf();")
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def fresh_pg_url(base_url: str) -> str:
    """A URL whose connections see an empty store: one schema of the session's server,
    migrated on first use and emptied (not migrated again) for each later test."""
    import psycopg  # noqa: PLC0415 - only with the postgres extra

    url = _MIGRATED.get(base_url)
    if url is None:
        with psycopg.connect(base_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {_SCHEMA}".encode())
        separator = "&" if "?" in base_url else "?"
        url = f"{base_url}{separator}options={quote(f'-csearch_path={_SCHEMA},public')}"
        open_url(url, Path("unused")).close()
        _MIGRATED[base_url] = url
        return url
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s"
            " AND tablename <> 'schema_migrations'",
            (_SCHEMA,),
        ).fetchall()
        tables = ", ".join(f"{_SCHEMA}.{row[0]}" for row in rows)
        conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE".encode())
        conn.execute(f"ALTER SEQUENCE {_SCHEMA}.emb_seq RESTART".encode())
        indexes = conn.execute(  # tenants' vector indexes outlive their rows
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE %s",
            (_SCHEMA, "%\\_vectors\\_ann\\_%"),
        ).fetchall()
        for (name,) in indexes:
            conn.execute(f"DROP INDEX {_SCHEMA}.{name}".encode())
    return url


def store_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "postgres":
        return fresh_pg_url(request.getfixturevalue("pg_server"))
    return f"sqlite:{tmp_path / 'store.db'}"


@pytest.fixture(params=KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(
    request: pytest.FixtureRequest, store_kind: str, tmp_path: Path
) -> Iterator[StoreFactory]:
    """A function that opens (or re-opens) the same store; every store it opened is closed."""
    url = store_url(request, store_kind, tmp_path)
    opened: list[RecordStore] = []

    def open_one() -> RecordStore:
        store = open_url(url, tmp_path / "store.db")
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()
