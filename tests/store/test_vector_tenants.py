"""A small tenant's vector hits are never lost to other tenants' vectors, however many and however
near the query theirs are (on PostgreSQL also when the large tenants have their own indexes:
`test_pg_vector_index.py`)."""

from __future__ import annotations

import numpy as np

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters, Store
from tests.store.helpers import memory, turn

DIM = 16
SMALL = Scope("small")
LARGE = [Scope(f"large-{i}") for i in range(6)]


def near(query: np.ndarray, count: int, spread: float, seed: int) -> np.ndarray:
    """`count` unit vectors around `query`, the larger `spread` the farther."""
    noise = np.random.default_rng(seed).normal(size=(count, query.shape[0])).astype(np.float32)
    rows = query[None, :] + spread * noise / np.sqrt(query.shape[0])
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def fill(store: Store, scope: Scope, layer: Layer, vectors: np.ndarray) -> list[str]:
    ids = [f"r{i}" for i in range(len(vectors))]
    if layer is Layer.L0:
        store.add_turns(scope, [turn(i, f"turn {i}", tenant=scope.tenant) for i in ids])
    else:
        store.upsert_memories(scope, [memory(i, f"memory {i}", tenant=scope.tenant) for i in ids])
    store.store_embeddings(layer, [(scope.tenant, i) for i in ids], vectors)
    return ids


def many_tenants(store: Store, layer: Layer, query: np.ndarray) -> list[str]:
    """Six tenants of 150 vectors right around the query, and one of 3 far from it."""
    for n, scope in enumerate(LARGE):
        fill(store, scope, layer, near(query, 150, 0.2, seed=10 + n))
    return fill(store, SMALL, layer, near(query, 3, 4.0, seed=99))


def test_a_small_tenant_keeps_every_hit_among_nearer_tenants(store: Store) -> None:
    query = near(np.ones(DIM, dtype=np.float32), 1, 0.0, seed=1)[0]
    for layer in (Layer.L0, Layer.L1):
        ids = many_tenants(store, layer, query)
        found = store.search_vector(SMALL, layer, query, Filters(), 10)
        assert sorted(c.id for c in found) == sorted(ids)
        assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
        filtered = store.search_vector(SMALL, layer, query, Filters(sessions=("s1",)), 10)
        assert sorted(c.id for c in filtered) == sorted(ids)
        large = store.search_vector(LARGE[0], layer, query, Filters(), 10)
        assert len(large) == 10 and not {c.id for c in large} - {f"r{i}" for i in range(150)}
