"""The SQLite store's in-memory vectors stay within their byte budget however many tenants a
long-running process searches, and a tenant whose vectors were dropped is searched as well as
before (its vectors are reloaded from the rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters
from stratamem.store.core.vectors import VectorCache, VectorCaches
from stratamem.store.sqlite.store import _SIZES_MAX, SqliteStore
from tests.store.helpers import memory, unit

DIM = 16


def test_the_least_recently_searched_tenants_are_dropped_beyond_the_budget() -> None:
    caches = VectorCaches(max_bytes=50_000)
    for i in range(2_000):
        cache = caches.get(f"tenant-{i}", "L1", DIM, "0")
        cache.add([1, 2], [unit(i, DIM).tobytes(), unit(i + 1, DIM).tobytes()], max_seq=2)
        caches.settle()
        assert caches.nbytes <= 50_000
    assert 0 < len(caches) < 10
    assert caches.get("tenant-1999", "L1", DIM, "0").size == 2  # the newest is kept


def test_a_cache_that_grew_since_it_was_counted_counts_as_its_new_size() -> None:
    """The caches' bytes are counted as they settle: one that grew pushes the oldest out, and
    a forgotten one no longer counts."""
    one = VectorCache(dim=DIM)
    one.add([1], [unit(1, DIM).tobytes()], max_seq=1)
    caches = VectorCaches(max_bytes=3 * one.nbytes + 1_000)  # three one-vector caches fit
    for name in ("old", "grows", "forgotten"):
        caches.get(name, "L1", DIM, "0").add([1], [unit(1, DIM).tobytes()], max_seq=1)
        caches.settle()
    assert len(caches) == 3
    caches.forget("forgotten")
    grows = caches.get("grows", "L1", DIM, "0")
    grows.add(list(range(2, 200)), [unit(n, DIM).tobytes() for n in range(2, 200)], max_seq=200)
    caches.settle()
    assert len(caches) == 1 and caches.get("grows", "L1", DIM, "0") is grows  # "old" dropped
    caches.forget("grows")
    cache = caches.get("new", "L1", DIM, "0")
    cache.add([1], [unit(1, DIM).tobytes()], max_seq=1)
    caches.get("newer", "L1", DIM, "0").add([1], [unit(2, DIM).tobytes()], max_seq=1)
    caches.settle()
    assert len(caches) == 2  # what was forgotten left the count


def test_the_newest_cache_is_kept_even_over_the_budget() -> None:
    caches = VectorCaches(max_bytes=1)
    cache = caches.get("big", "L1", DIM, "0")
    cache.add([1], [unit(1, DIM).tobytes()], max_seq=1)
    caches.settle()
    assert len(caches) == 1


def test_a_store_searching_many_tenants_keeps_a_few_and_finds_the_same(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "m.db")
    store._caches.max_bytes = 20_000  # a few tenants' worth (each cache holds 64 slots)
    try:
        query = unit(0, DIM)
        first = _searched(store, Scope("t-0"), query)
        for i in range(1, 40):
            _searched(store, Scope(f"t-{i}"), query)
            assert store._caches.nbytes <= 20_000
        assert len(store._caches) < 10
        assert _searched(store, Scope("t-0"), query) == first  # reloaded, same answer
    finally:
        store.close()


def _searched(store: SqliteStore, scope: Scope, query: np.ndarray) -> list[str]:
    ids = [f"m{i}" for i in range(5)]
    if not store.list_memories(scope):
        store.upsert_memories(scope, [memory(i, f"fact {i}", tenant=scope.tenant) for i in ids])
        vectors = np.stack([unit(n + 1, DIM) for n in range(5)])
        store.store_embeddings(Layer.L1, [(scope.tenant, i) for i in ids], vectors)
    hits = store.search_vector(scope, Layer.L1, query, Filters(), 3)
    return [hit.id for hit in hits]


def test_the_row_counts_that_steer_full_text_plans_stay_few(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "m.db")
    try:
        with store.reading() as conn:
            for i in range(2 * _SIZES_MAX + 10):
                store._tenant_rows(conn, f"tenant-{i}", Layer.L1)
                assert len(store._sizes) <= _SIZES_MAX
    finally:
        store.close()


def test_a_small_tenant_costs_a_few_kilobytes_not_a_megabyte() -> None:
    caches = VectorCaches()
    cache = caches.get("small", "L1", 384, "0")
    cache.add([1, 2, 3], [unit(n, 384).tobytes() for n in range(3)], max_seq=3)
    assert caches.nbytes < 200_000  # 64 slots of 384 floats: 100 KB (1,024 slots were 1.6 MB)
