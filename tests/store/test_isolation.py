"""Tenant isolation: for every read path, tenant A never sees tenant B's rows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stratamem.domain import Layer, MemoryType, Scope
from stratamem.errors import NotFound, StoreError
from stratamem.store.core.port import Filters, Store
from tests.store.helpers import T0, memory, turn, unit

A, B = Scope("tenant-a"), Scope("tenant-b")
SHARED_TEXT = "the secret launch code is blue falcon"
FILTER_CASES = [
    Filters(),
    Filters(sessions=("s1",)),
    Filters(types=(MemoryType.EPISODIC, MemoryType.PERSONA)),
    Filters(since=T0 - 1, until=T0 + 1),
    Filters(as_of=T0 + 1),
]


@pytest.fixture
def two_tenants(store: Store) -> Store:
    """Identical ids, sessions and texts in both tenants; B's rows are marked in their text."""
    for scope, mark in ((A, "alpha"), (B, "bravo")):
        store.add_turns(scope, [turn("t1", f"{SHARED_TEXT} {mark}", tenant=scope.tenant)])
        store.upsert_memories(scope, [memory("m1", f"{SHARED_TEXT} {mark}", tenant=scope.tenant)])
    for layer in Layer:
        items = [(A.tenant, "t1" if layer is Layer.L0 else "m1")]
        items.append((B.tenant, items[0][1]))
        store.store_embeddings(layer, items, np.stack([unit(1), unit(1)]))
    return store


@pytest.mark.parametrize(("layer", "filters"), list(itertools.product(Layer, FILTER_CASES)))
def test_text_and_vector_search_stay_in_tenant(
    two_tenants: Store, layer: Layer, filters: Filters
) -> None:
    for found in (
        two_tenants.search_text(A, layer, "secret launch code bravo", filters, 50),
        two_tenants.search_vector(A, layer, unit(1), filters, 50),
    ):
        hits = two_tenants.load_hits(A, layer, [c.id for c in found])
        assert all("bravo" not in hit.text for hit in hits.values())
        assert len(found) <= 1


def test_direct_reads_stay_in_tenant(two_tenants: Store) -> None:
    assert [t.text.endswith("alpha") for t in two_tenants.get_turns(A, ["t1"])] == [True]
    assert all(t.text.endswith("alpha") for t in two_tenants.list_turns(A, "s1"))
    assert two_tenants.get_memory(A, "m1").content.endswith("alpha")
    assert all(m.content.endswith("alpha") for m in two_tenants.list_memories(A))
    for layer in Layer:
        loaded = two_tenants.load_hits(A, layer, ["t1", "m1"])
        assert all(h.text.endswith("alpha") for h in loaded.values())
    assert two_tenants.stats(A)["L0"]["records"] == 1


def test_unknown_tenant_sees_nothing(two_tenants: Store) -> None:
    nobody = Scope("nobody")
    assert two_tenants.get_turns(nobody, ["t1"]) == []
    assert two_tenants.list_turns(nobody, "s1") == []
    assert two_tenants.list_sessions(nobody) == []
    assert two_tenants.list_memories(nobody) == []
    with pytest.raises(NotFound):
        two_tenants.get_memory(nobody, "m1")
    for layer in Layer:
        assert two_tenants.search_text(nobody, layer, SHARED_TEXT, Filters(), 10) == []
        assert two_tenants.search_vector(nobody, layer, unit(1), Filters(), 10) == []
        assert two_tenants.load_hits(nobody, layer, ["t1", "m1"]) == {}


def test_writes_cannot_cross_tenants(two_tenants: Store) -> None:
    with pytest.raises(StoreError):
        two_tenants.upsert_memories(A, [memory("m1", "overwrite", tenant=B.tenant)])
    assert two_tenants.get_memory(B, "m1").content.endswith("bravo")
    two_tenants.upsert_memories(A, [memory("m1", "changed in A", tenant=A.tenant)])
    assert two_tenants.get_memory(B, "m1").content.endswith("bravo")


def test_rare_and_common_words_both_stay_in_tenant(store: Store) -> None:
    """A rare word is searched across the index and joined; a word as common as the tenant's
    rows is searched within the tenant's scope. Both plans must keep to the tenant."""
    for scope in (A, B):
        store.add_turns(
            scope,
            [turn(f"t{i}", f"common words number {i}", tenant=scope.tenant) for i in range(30)]
            # In a session of its own: a turn is also found by its neighbours' words.
            + [turn("rare", f"an okapi at {scope.tenant}", session="s2", tenant=scope.tenant)],
        )
    common = store.search_text(A, Layer.L0, "common words", Filters(), 100)
    assert len(common) == 30
    assert {h.text for h in store.load_hits(A, Layer.L0, [c.id for c in common]).values()} == {
        f"common words number {i}" for i in range(30)
    }
    rare = store.search_text(A, Layer.L0, "okapi", Filters(), 100)
    assert [store.load_hits(A, Layer.L0, [c.id for c in rare])[c.id].text for c in rare] == [
        "an okapi at tenant-a"
    ]


def test_another_tenants_words_do_not_change_how_a_tenants_words_weigh(store: Store) -> None:
    """BM25 weighs a word by how many rows hold it: counted over one tenant's rows only, so
    what another tenant writes cannot reorder this tenant's hits (nor reveal its words)."""
    for layer in (Layer.L0, Layer.L1):
        texts = {"short": "banana", "long": "cherry with a few more words around it"}
        _write(store, A, layer, texts)
        _write(store, B, layer, {f"x{i}": f"banana bread number {i}" for i in range(40)})
        before = [c for c in store.search_text(A, layer, "banana cherry", Filters(), 10)]
        _write(store, B, layer, {f"y{i}": f"more banana, banana {i}" for i in range(200)})
        after = store.search_text(A, layer, "banana cherry", Filters(), 10)
        assert [c.id for c in before] == [c.id for c in after] == ["short", "long"]


def _write(store: Store, scope: Scope, layer: Layer, texts: dict[str, str]) -> None:
    if layer is Layer.L0:
        turns = [turn(i, t, session=i, tenant=scope.tenant) for i, t in texts.items()]
        store.add_turns(scope, turns)
    else:
        store.upsert_memories(scope, [memory(i, t, tenant=scope.tenant) for i, t in texts.items()])
