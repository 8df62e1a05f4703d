"""How often the PostgreSQL store waits for the server (issue 32: on a busy machine each wait
costs a wake-up of the backend and of the client, more than the work of a small query).

A capture waits for the server twice: once for what it reads (the session's last
turns and the new turn's sequence number, sent with the locks and BEGIN in one pipeline) and once
for the rest of its writes and COMMIT. psycopg's own `transaction()` in pipeline mode synced at
each of its nested pipelines: five waits a capture (issue 32, capture throughput). A capture that
fails, on the server or in our code between its statements, is rolled back before its connection
serves the next one.

A vector search of a tenant below the index threshold, its vectors cached in the process, waits
twice too: for the tenant's state (has it an index? which model?) together with the vectors
written since the cache looked, then for the hits' rows. It was four queries, each waited for."""

from __future__ import annotations

import itertools
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import psycopg
import pytest
from psycopg import pq

from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Role, Scope, Turn
from stratamem.errors import StoreError
from stratamem.store.core.port import EmbeddingInfo, Filters
from stratamem.store.postgres.connection import session_key
from stratamem.store.postgres.store import PostgresStore
from stratamem.store.postgres.tokens import Tokenizer
from tests.stores import fresh_pg_url

pytestmark = pytest.mark.postgres

SCOPE = Scope("t1")
DIM = 16


def turn(n: int, session: str = "s1") -> Turn:
    return Turn(f"{session}-{n}", SCOPE.tenant, session, Role.USER, f"turn {n} about rain", 1e9 + n)


@pytest.fixture
def store(pg_server: str) -> Iterator[PostgresStore]:
    """A store on one connection, so the connection traced is the one its captures use."""
    opened = PostgresStore(fresh_pg_url(pg_server), pool_size=1)
    try:
        yield opened
    finally:
        opened.close()


@contextmanager
def traced(store: PostgresStore) -> Iterator[list[str]]:
    """The store's connection's protocol messages while the block runs, one a line ("F" the
    client's, "B" the server's), in the list yielded once the block ends."""
    lines: list[str] = []
    with tempfile.TemporaryFile("w+") as out:
        with store._pool.pool.connection() as conn:
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield lines
        finally:
            with store._pool.pool.connection() as conn:
                conn.pgconn.untrace()
            out.flush()
            os.lseek(out.fileno(), 0, os.SEEK_SET)
            lines.extend(out.read().splitlines())


def waits(lines: list[str]) -> int:
    """How many times the client waited for the server: each switch from its messages to the
    server's."""
    sides = [line.split("\t", 1)[0] for line in lines if line[:1] in "FB"]
    return sum(1 for pair in itertools.pairwise(sides) if pair == ("F", "B"))


def test_a_capture_waits_for_the_server_twice(store: PostgresStore) -> None:
    for n in range(1, 8):  # past psycopg's preparing of the statements
        store.add_turns(SCOPE, [turn(n)])
    with traced(store) as lines:
        store.add_turns(SCOPE, [turn(8)])
    assert waits(lines) == 2
    assert [t.seq for t in store.list_turns(SCOPE, "s1")] == list(range(1, 9))


def test_a_cached_vector_search_waits_for_the_server_twice(store: PostgresStore) -> None:
    store.bind_embedding(EmbeddingInfo("m", DIM))
    memories = [MemoryRecord(f"m{i}", SCOPE.tenant, MemoryType.EPISODIC, f"fact {i}",
                             valid_from=1e9, created_at=1e9, updated_at=1e9, mode=Mode.MANUAL)
                for i in range(20)]  # fmt: skip
    store.upsert_memories(SCOPE, memories)
    vectors = np.random.default_rng(3).normal(size=(20, DIM)).astype(np.float32)
    store.store_embeddings(Layer.L1, [(SCOPE.tenant, m.id) for m in memories], vectors)
    for n in range(6):  # the cache filled, the statements prepared
        store.search_vector(SCOPE, Layer.L1, vectors[n], Filters(), 5)
    with traced(store) as lines:
        found = store.search_vector(SCOPE, Layer.L1, vectors[7], Filters(), 5)
    assert waits(lines) == 2
    assert found[0].id == "m7"
    store.store_embeddings(Layer.L1, [(SCOPE.tenant, "m7")], -vectors[7:8])  # a new vector
    with traced(store) as lines:
        found = store.search_vector(SCOPE, Layer.L1, vectors[7], Filters(), 20)
    assert waits(lines) == 2
    assert found[-1].id == "m7"


def test_a_capture_refused_by_the_server_is_rolled_back(store: PostgresStore) -> None:
    store.add_turns(SCOPE, [turn(1)])
    with store._pool.pool.connection() as conn:
        conn.execute("SET lock_timeout = '50ms'")
    with psycopg.connect(store.url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                       (session_key(SCOPE.tenant, "s1"),))  # fmt: skip
        with pytest.raises(StoreError, match="lock timeout"):
            store.add_turns(SCOPE, [turn(2)])
    assert_idle_and_capturing(store)


def test_a_capture_that_fails_between_its_statements_is_rolled_back(
    store: PostgresStore,
) -> None:
    store.add_turns(SCOPE, [turn(1)])
    store._tokenizer.close()  # indexing the new turn fails after its insert was read
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        store.add_turns(SCOPE, [turn(2)])
    store._tokenizer = Tokenizer()
    assert_idle_and_capturing(store)


def assert_idle_and_capturing(store: PostgresStore) -> None:
    """Nothing of the failed capture stayed, its connection is out of any transaction, and the
    next capture is written and found."""
    with store._pool.pool.connection() as conn:
        assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert [t.id for t in store.list_turns(SCOPE, "s1")] == ["s1-1"]
    stored = store.add_turns(SCOPE, [turn(3)])
    assert [t.seq for t in stored] == [2]
    found = store.search_text(SCOPE, Layer.L0, "rain", Filters(), 10)
    assert sorted(c.id for c in found) == ["s1-1", "s1-3"]


def test_a_capture_reads_no_other_turns_of_the_tenant(fresh_store: PostgresStore) -> None:
    """On tables never analysed (a new database), the capture's index write looked its rows up
    by id in a join that read every turn of the tenant through the tenant's index (the planner
    took the tenant for one row); it now has their row ids. (Its update of their lengths may
    scan so small a table, as the planner likes: not counted.)"""
    for n in range(1, 201):
        fresh_store.add_turns(SCOPE, [turn(n, f"s{n % 4}")])
    before = turns_fetched_by_index(fresh_store)
    fresh_store.add_turns(SCOPE, [turn(201, "s1")])
    assert turns_fetched_by_index(fresh_store) - before < 40
    assert [t.id for t in fresh_store.list_turns(SCOPE, "s1")][-2:] == ["s1-197", "s1-201"]


def turns_fetched_by_index(store: PostgresStore) -> int:
    """Rows of `turns` fetched through its indexes so far, as the statistics count them (the
    store's connection's pending counts flushed first)."""
    with store._pool.pool.connection() as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
    with psycopg.connect(store.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(idx_tup_fetch, 0) FROM pg_stat_user_tables"
            " WHERE relname = 'turns'"
        ).fetchone()
    assert row is not None
    return int(row[0])
