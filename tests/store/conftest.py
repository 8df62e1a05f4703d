"""The store the contract suites run against: each of `tests/stores.py`'s kinds; and a
PostgreSQL store in a database of its own, for the plan tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from stratamem.store.core.port import Store
from stratamem.store.opening import open_url
from tests.stores import StoreFactory

if TYPE_CHECKING:
    from stratamem.store.postgres.store import PostgresStore

__all__ = ["StoreFactory"]


@pytest.fixture
def store(open_store: StoreFactory) -> Store:
    return open_store()


@pytest.fixture
def fresh_store(pg_server: str, tmp_path: Path) -> Iterator[PostgresStore]:
    """A store in a database of its own: tables created now, never analysed."""
    import psycopg  # noqa: PLC0415 - only with the postgres extra

    from stratamem.store.postgres.store import PostgresStore  # noqa: PLC0415

    name = f"plan_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    store = open_url(urlsplit(pg_server)._replace(path=f"/{name}").geturl(), tmp_path / "u.db")
    assert isinstance(store, PostgresStore)
    try:
        yield store
    finally:
        store.close()
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)".encode())
