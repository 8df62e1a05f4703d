"""PostgreSQL's per-tenant HNSW indexes (`store/postgres/vector_index.py`): built when a tenant
crosses the threshold, used by the planner, exact for the tenant whatever other tenants hold,
close to the exact search in recall, and gone with the tenant or the model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import psycopg
import pytest

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import EmbeddingInfo, Filters
from stratamem.store.opening import open_url
from stratamem.store.postgres import vector_search
from stratamem.store.postgres.connection import translate
from stratamem.store.postgres.store import PostgresStore
from stratamem.store.postgres.vector_index import index_name
from tests.store.helpers import memory
from tests.store.test_vector_tenants import DIM, LARGE, SMALL, fill, many_tenants, near
from tests.stores import fresh_pg_url

pytestmark = pytest.mark.postgres
THRESHOLD = 100


@pytest.fixture
def pg(pg_server: str, tmp_path: Path) -> Iterator[PostgresStore]:
    store = PostgresStore(fresh_pg_url(pg_server), ann_min_vectors=THRESHOLD,
                          background_builds=False)  # fmt: skip
    store.bind_embedding(EmbeddingInfo("test-model", DIM))
    yield store
    store.close()


def indexes(store: PostgresStore) -> set[str]:
    with store.reading() as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE indexname LIKE '%\\_ann\\_%'"
        ).fetchall()
    return {str(row[0]) for row in rows}


def plan(store: PostgresStore, scope: Scope, layer: Layer, query: np.ndarray) -> str:
    """The plan of the index scan, as the store sends it."""
    text = vector_search.vector_text(query)
    with store.reading() as conn:
        cursor = psycopg.ClientCursor(conn.raw)
        with conn.raw.transaction():
            cursor.execute(translate(vector_search.INDEX_SCAN_SETTINGS), ["100"])
            explain = "EXPLAIN " + vector_search.neighbours_sql(layer, DIM)
            rows = cursor.execute(translate(explain), [text, scope.tenant, text, 100]).fetchall()
    return "\n".join(str(row[0]) for row in rows)


@pytest.mark.parametrize("layer", [Layer.L0, Layer.L1])
def test_large_tenants_indexes_never_take_a_small_tenants_hits(
    pg: PostgresStore, layer: Layer
) -> None:
    query = near(np.ones(DIM, dtype=np.float32), 1, 0.0, seed=1)[0]
    ids = many_tenants(pg, layer, query)
    for scope in (*LARGE, SMALL):  # the small one too: its index holds its 3 vectors only
        assert pg.vectors.build(scope.tenant, layer)
    assert index_name(LARGE[0].tenant, layer) in indexes(pg)
    assert index_name(LARGE[0].tenant, layer) in plan(pg, LARGE[0], layer, query)
    found = pg.search_vector(SMALL, layer, query, Filters(), 10)
    assert sorted(c.id for c in found) == sorted(ids)
    through_index = pg.search_vector(LARGE[0], layer, query, Filters(), 10)
    assert not {c.id for c in through_index} - {f"r{i}" for i in range(150)}
    assert len(through_index) == 10
    wide = pg.search_vector(LARGE[0], layer, query, Filters(), 120)  # past the default ef_search
    assert len(wide) == 120


def test_the_index_finds_what_the_exact_search_finds(pg: PostgresStore) -> None:
    """recall@10 of the index path against the exact search, 2,000 random vectors, 50
    queries (bench/postgres.py measures it at 100k)."""
    vectors = near(np.ones(DIM, dtype=np.float32), 2000, 30.0, seed=5)
    fill(pg, SMALL, Layer.L1, vectors)
    assert pg.vectors.build(SMALL.tenant, Layer.L1)
    queries = near(np.ones(DIM, dtype=np.float32), 50, 30.0, seed=6)
    overlap = []
    for query in queries:
        ann = pg.search_vector(SMALL, Layer.L1, query, Filters(), 10)
        with pg.reading() as conn:
            exact = vector_search.search(conn, SMALL.tenant, Layer.L1, query, Filters(), 10)
        overlap.append(len({c.id for c in ann} & {c.id for c in exact}) / 10)
    assert np.mean(overlap) >= 0.95


@pytest.mark.parametrize("layer", [Layer.L0, Layer.L1])
def test_the_nearest_pieces_first_rank_as_every_vector_scored(
    pg: PostgresStore, layer: Layer
) -> None:
    """Without an index, the exact search takes the nearest pieces, then checks their records:
    the same records in the same order as scoring every vector of the tenant."""
    vectors = near(np.ones(DIM, dtype=np.float32), 300, 30.0, seed=7)
    fill(pg, SMALL, layer, vectors)
    for query in near(np.ones(DIM, dtype=np.float32), 10, 30.0, seed=8):
        for filters in (Filters(), Filters(sessions=("s1",)), Filters(sessions=("none",))):
            with pg.reading() as conn:
                first = vector_search.search(conn, SMALL.tenant, layer, query, filters, 20)
                every = vector_search.search_all(conn, SMALL.tenant, layer, query, filters, 20)
            assert [c.id for c in first] == [c.id for c in every]


def test_filters_that_leave_few_neighbours_fall_back_to_the_exact_search(
    pg: PostgresStore,
) -> None:
    query = near(np.ones(DIM, dtype=np.float32), 1, 0.0, seed=1)[0]
    fill(pg, SMALL, Layer.L1, near(query, 400, 0.3, seed=2))
    pg.vectors.build(SMALL.tenant, Layer.L1)
    with pg.writing() as conn:
        conn.execute("UPDATE memories SET session = 'rare' WHERE id IN ('r5', 'r390')")
    found = pg.search_vector(SMALL, Layer.L1, query, Filters(sessions=("rare",)), 10)
    assert sorted(c.id for c in found) == ["r390", "r5"]


def test_a_tenant_crossing_the_threshold_gets_its_index_in_the_background(
    pg_server: str,
) -> None:
    store = PostgresStore(fresh_pg_url(pg_server), ann_min_vectors=THRESHOLD)
    assert store.vectors.ann_min_vectors == THRESHOLD
    try:
        store.bind_embedding(EmbeddingInfo("test-model", DIM))
        fill(store, SMALL, Layer.L1, near(np.ones(DIM, dtype=np.float32), 60, 30.0, seed=3))
        store.vectors.wait_for_builds()
        assert index_name(SMALL.tenant, Layer.L1) not in indexes(store)
        vectors = near(np.ones(DIM, dtype=np.float32), 60, 30.0, seed=4)
        ids = [f"x{i}" for i in range(60)]
        store.upsert_memories(SMALL, [memory(i, f"memory {i}", tenant=SMALL.tenant) for i in ids])
        store.store_embeddings(Layer.L1, [(SMALL.tenant, i) for i in ids], vectors)
        store.vectors.wait_for_builds()
        assert index_name(SMALL.tenant, Layer.L1) in indexes(store)
        found = store.search_vector(SMALL, Layer.L1, vectors[7], Filters(), 1)
        assert [c.id for c in found] == ["x7"]
    finally:
        store.close()


def test_the_setting_reaches_the_store(pg_server: str, tmp_path: Path) -> None:
    store = open_url(fresh_pg_url(pg_server), tmp_path, vector_index_min=5)
    try:
        assert isinstance(store, PostgresStore) and store.vectors.ann_min_vectors == 5
    finally:
        store.close()


def test_erasing_the_tenant_drops_its_index_and_vectors(pg: PostgresStore) -> None:
    vectors = near(np.ones(DIM, dtype=np.float32), 150, 30.0, seed=3)
    fill(pg, SMALL, Layer.L1, vectors)
    pg.vectors.build(SMALL.tenant, Layer.L1)
    pg.erase_tenant(SMALL)
    assert index_name(SMALL.tenant, Layer.L1) not in indexes(pg)
    with pg.reading() as conn:
        assert conn.execute("SELECT count(*) FROM memory_vectors").fetchone()[0] == 0
    assert pg.search_vector(SMALL, Layer.L1, vectors[0], Filters(), 10) == []


def test_a_new_model_drops_every_index(pg: PostgresStore) -> None:
    fill(pg, SMALL, Layer.L1, near(np.ones(DIM, dtype=np.float32), 150, 30.0, seed=3))
    pg.vectors.build(SMALL.tenant, Layer.L1)
    pg.reset_embeddings(EmbeddingInfo("other-model", 2 * DIM))
    assert indexes(pg) == set()
    wider = near(np.ones(2 * DIM, dtype=np.float32), 150, 30.0, seed=4)
    pg.store_embeddings(Layer.L1, [(SMALL.tenant, f"r{i}") for i in range(150)], wider)
    found = pg.search_vector(SMALL, Layer.L1, wider[3], Filters(), 1)
    assert [c.id for c in found] == ["r3"]


def test_a_changed_memory_is_not_found_by_its_old_vector(pg: PostgresStore) -> None:
    vectors = near(np.ones(DIM, dtype=np.float32), 150, 30.0, seed=3)
    fill(pg, SMALL, Layer.L1, vectors)
    pg.vectors.build(SMALL.tenant, Layer.L1)
    pg.upsert_memories(SMALL, [replace(memory("r9", "memory r9", tenant=SMALL.tenant),
                                       content="new")])  # fmt: skip
    found = pg.search_vector(SMALL, Layer.L1, vectors[9], Filters(), 5)
    assert "r9" not in {c.id for c in found} and len(found) == 5


def test_a_long_running_store_keeps_a_bounded_count_of_tenants(pg_server: str) -> None:
    """Each tenant written for is counted (to know when its index is due); past
    `tracked_max` the counts are forgotten, and a forgotten tenant still gets its index."""
    store = PostgresStore(fresh_pg_url(pg_server), ann_min_vectors=THRESHOLD)
    store.vectors.tracked_max = 3
    try:
        store.bind_embedding(EmbeddingInfo("test-model", DIM))
        for n in range(8):
            fill(store, Scope(f"t{n}"), Layer.L1, near(np.ones(DIM, dtype=np.float32), 10, 30.0,
                                                        seed=n))  # fmt: skip
            assert store.vectors.tracked <= 3
        vectors = near(np.ones(DIM, dtype=np.float32), THRESHOLD, 30.0, seed=20)
        ids = [f"x{i}" for i in range(THRESHOLD)]
        store.upsert_memories(Scope("t0"), [memory(i, f"memory {i}", tenant="t0") for i in ids])
        store.store_embeddings(Layer.L1, [("t0", i) for i in ids], vectors)
        store.vectors.wait_for_builds()
        assert index_name("t0", Layer.L1) in indexes(store)
    finally:
        store.close()
