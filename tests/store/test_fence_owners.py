"""Migration 8 gives fencing rows an owner: rows recorded before it keep none and accept their
token from any writer, as before, until a greater token takes them over; on both databases."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.store.core.port import Fence, Store
from stratamem.store.opening import open_url
from stratamem.store.postgres import schema as pg_schema
from stratamem.store.sqlite import migrations as lite_schema
from stratamem.store.sqlite.connection import connect
from tests.store.helpers import memory
from tests.stores import KINDS

ACME = Scope("acme")


def _old_sqlite_store(tmp_path: Path) -> str:
    path = tmp_path / "old.db"
    conn = connect(path)
    lite_schema.migrate(conn, tuple(m for m in lite_schema.MIGRATIONS if m.version < 8))
    conn.execute("INSERT INTO fences (key, token) VALUES ('acme/s1', 5)")
    conn.close()
    return f"sqlite:{path}"


@contextlib.contextmanager
def _old_postgres_store(base_url: str) -> Iterator[str]:
    """A database of its own (the `vector` extension is per database: in a schema of the
    shared one, its type would live in the other schema)."""
    import psycopg  # noqa: PLC0415 - only with the postgres extra

    from stratamem.store.postgres.migrations import migrate  # noqa: PLC0415 - likewise

    name = f"fence_owners_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    url = urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, tuple(m for m in pg_schema.MIGRATIONS if m.version < 8))
        conn.execute("INSERT INTO fences (key, token) VALUES ('acme/s1', 5)")
    yield url
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)".encode())


@pytest.fixture(params=KINDS)
def upgraded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store with a fence recorded before migration 8, opened (so migrated) by this code."""
    with contextlib.ExitStack() as stack:
        if request.param == "postgres":
            url = stack.enter_context(_old_postgres_store(request.getfixturevalue("pg_server")))
        else:
            url = _old_sqlite_store(tmp_path)
        store = open_url(url, tmp_path / "unused.db")
        stack.callback(store.close)
        yield store


def test_a_fence_from_before_the_migration_keeps_todays_rule(upgraded: Store) -> None:
    assert upgraded.newest_fence("acme/s1") == 5
    for owner in ("a", "b", None):  # equal tokens pass from anyone, and claim nothing
        upgraded.upsert_memories(ACME, [memory("m1", f"{owner}")], fence=Fence("acme/s1", 5, owner))
    with pytest.raises(StaleFencingToken):
        upgraded.upsert_memories(ACME, [memory("m1", "old")], fence=Fence("acme/s1", 4, "a"))
    upgraded.upsert_memories(ACME, [memory("m1", "c")], fence=Fence("acme/s1", 6, "c"))
    with pytest.raises(StaleFencingToken) as refused:  # taken over: its owner's alone
        upgraded.upsert_memories(ACME, [memory("m1", "a")], fence=Fence("acme/s1", 6, "a"))
    assert refused.value.newest == 6
    assert upgraded.get_memory(ACME, "m1").content == "c"
