"""`SqlLayerStore` on a real SQLite file and PostgreSQL: commits are all or nothing, state is
checked, old versions stay reachable."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from stratamem.domain import MemoryRecord, MemoryType, Mode, Profile, Role, Scene, Scope, Turn
from stratamem.errors import LayerConflict, NotFound, StaleFencingToken
from stratamem.store.core.port import Fence
from stratamem.store.layers.port import Extraction, L1Commit, L2Commit, L3Commit, Supersede
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.opening import RecordStore
from tests.stores import StoreFactory

SCOPE = Scope("acme")


@pytest.fixture
def stores(open_store: StoreFactory) -> Iterator[tuple[RecordStore, SqlLayerStore]]:
    store = open_store()
    store.add_turns(SCOPE, [Turn(f"t{i}", "acme", "s1", Role.USER, f"turn {i}", 100.0 + i)
                            for i in range(3)])  # fmt: skip
    yield store, SqlLayerStore(store)


def memory(memory_id: str, content: str = "fact", at: float = 10.0) -> MemoryRecord:
    return MemoryRecord(memory_id, "acme", MemoryType.PERSONA, content, valid_from=at,
                        created_at=at, updated_at=at, mode=Mode.LLM)  # fmt: skip


def made(*memory_ids: str) -> Extraction:
    """An extraction that made these memories."""
    return Extraction([memory(i) for i in memory_ids])


def test_session_state_counts_turns_past_the_cursor(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    _, layers = stores
    state = layers.session_state(SCOPE, "s1")
    assert (state.cursor_seq, state.last_seq, state.pending_turns) == (0, 3, 3)
    layers.commit_l1(SCOPE, L1Commit("s1", "task", 0, 2, 50.0, made("m1")))
    state = layers.session_state(SCOPE, "s1")
    assert (state.cursor_seq, state.pending_turns, state.l1_runs) == (2, 1, 1)
    assert state.last_l1_at == 50.0
    assert layers.pending_turns(SCOPE) == 1
    assert layers.tenant_state(SCOPE).memories_since_l3 == 1
    assert layers.session_state(Scope("other"), "s1").pending_turns == 0  # tenants apart


def test_a_refused_commit_writes_nothing(stores: tuple[RecordStore, SqlLayerStore]) -> None:
    store, layers = stores
    layers.commit_l1(SCOPE, L1Commit("s1", "a", 0, 1, 50.0, made("m1")), Fence("k", 5))
    cases = [
        (L1Commit("s1", "b", 0, 2, 60.0, made("m2")), None, LayerConflict),  # cursor moved
        (L1Commit("s1", "c", 1, 2, 60.0, Extraction([memory("m3")], [Supersede("gone", "m3")])),
         None, LayerConflict),
        (L1Commit("s1", "d", 1, 2, 60.0, made("m1")), None, LayerConflict),  # id exists
        (L1Commit("s1", "a", 1, 2, 60.0, made("m4")), None, LayerConflict),  # receipt
        (L1Commit("s1", "e", 1, 2, 60.0, made("m5")), Fence("k", 4), StaleFencingToken),
    ]
    for commit, fence, error in cases:
        with pytest.raises(error):
            layers.commit_l1(SCOPE, commit, fence)
    assert [m.id for m in store.list_memories(SCOPE)] == ["m1"]
    assert layers.session_state(SCOPE, "s1").cursor_seq == 1


def test_merge_history_reaches_every_version(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    store, layers = stores
    pair = [memory("m1", "a"), memory("m2", "b")]
    layers.commit_l1(SCOPE, L1Commit("s1", "a", 0, 1, 10.0, Extraction(pair)))
    merged = memory("m3", "a and b", at=20.0)
    links = [Supersede("m1", "m3"), Supersede("m2", "m3")]
    layers.commit_l1(SCOPE, L1Commit("s1", "b", 1, 2, 20.0, Extraction([merged], links)))

    assert [m.id for m in layers.memory_history(SCOPE, "m1")] == ["m1", "m2", "m3"]
    assert [m.id for m in layers.memory_history(SCOPE, "m3")] == ["m1", "m2", "m3"]
    old = store.get_memory(SCOPE, "m2")
    assert (old.valid_to, old.superseded_by) == (20.0, "m3")
    with pytest.raises(NotFound):
        layers.memory_history(Scope("other"), "m1")
    changed, mark = layers.changed_memories(SCOPE, 0, 10)
    assert [m.id for m in changed] == ["m3"] and mark == 3


def test_profile_versions(stores: tuple[RecordStore, SqlLayerStore]) -> None:
    _, layers = stores
    layers.commit_l3(SCOPE, L3Commit("a", 1.0, Profile("acme", "v1 body", 1, 1.0, Mode.LLM)))
    layers.commit_l3(SCOPE, L3Commit("b", 2.0, Profile("acme", "v2 body", 2, 2.0, Mode.LLM)))
    current = layers.profile(SCOPE)
    assert current is not None and current.body == "v2 body"
    assert [p.version for p in layers.profile_history(SCOPE)] == [1, 2]
    with pytest.raises(LayerConflict):
        layers.commit_l3(SCOPE, L3Commit("c", 3.0, Profile("acme", "again", 2, 3.0, Mode.LLM)))


def test_the_newest_scene_time_is_when_its_newest_version_was_written(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    """Not when the scene was first created: L3's "scenes changed since my read" (and its
    backlog source) missed every update of an existing scene, and an L3 ran on the count of
    memories alone right after the L2 that updated it (`bench/layers_cost.py`)."""
    _, layers = stores
    layers.commit_l1(SCOPE, L1Commit("s1", "a", 0, 1, 10.0, made("m1")))
    first = Scene("sc1", "acme", "Life", "s", "body one", version=1, memory_ids=("m1",),
                  created_at=20.0, updated_at=20.0, mode=Mode.LLM)  # fmt: skip
    layers.commit_l2(SCOPE, L2Commit("l2-a", None, 0, 1, 20.0, [first]))
    assert layers.newest_scene_at(SCOPE) == 20.0
    again = replace(first, body="body two", version=2, updated_at=90.0)
    layers.commit_l2(SCOPE, L2Commit("l2-b", None, 1, 1, 90.0, [again]))
    assert layers.newest_scene_at(SCOPE) == 90.0
