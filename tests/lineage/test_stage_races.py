"""A stage that read what a forget then erased writes nothing built on it: its commit is refused
(`LayerConflict`) and the task runs again on what is left (both stores)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stratamem.domain import Scene, Scope
from stratamem.errors import LayerConflict
from stratamem.store.layers.port import Extraction, L1Commit, L2Commit
from stratamem.store.layers.store import SqlLayerStore
from tests.store.helpers import memory, turn
from tests.stores import StoreFactory

ACME = Scope("acme")


def test_a_commit_built_on_a_forgotten_source_is_refused(open_store: StoreFactory) -> None:
    store = open_store()
    layers = SqlLayerStore(store)
    store.add_turns(ACME, [turn("t1", "I live in Lisbon"), turn("t2", "I like tea")])
    kept = replace(memory("m-kept", "likes tea"), source_turn_ids=("t2",))
    gone = replace(memory("m-gone", "lives in Lisbon"), source_turn_ids=("t1", "t-erased"))
    with pytest.raises(LayerConflict, match="t-erased"):
        layers.commit_l1(ACME, L1Commit("s1", "task-1", 0, 2, 1.0, Extraction([kept, gone])))
    layers.commit_l1(ACME, L1Commit("s1", "task-1", 0, 2, 1.0, Extraction([kept])))
    scene = Scene(id="sc1", tenant="acme", title="Tea", summary="", body="- likes tea",
                  memory_ids=("m-kept", "m-erased"))  # fmt: skip
    with pytest.raises(LayerConflict, match="m-erased"):
        layers.commit_l2(ACME, L2Commit("task-2", None, 0, 1, 2.0, [scene]))
    layers.commit_l2(ACME, L2Commit("task-2", None, 0, 1, 2.0,
                                    [replace(scene, memory_ids=("m-kept",))]))  # fmt: skip
    assert [s.id for s in layers.current_scenes(ACME)] == ["sc1"]
