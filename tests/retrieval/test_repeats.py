"""A hit that only repeats turns already in the list is dropped."""

from __future__ import annotations

from stratamem.domain import Hit, Layer
from stratamem.retrieval.search import without_repeats


def turn(hit_id: str) -> Hit:
    return Hit(id=hit_id, layer=Layer.L0, text=hit_id, session="s", score=1.0)


def memory(hit_id: str, *sources: str) -> Hit:
    return Hit(id=hit_id, layer=Layer.L1, text=hit_id, session="s", score=1.0,
               source_turn_ids=sources)


def test_a_memory_drawn_from_a_listed_turn_is_dropped_and_vice_versa() -> None:
    hits = [turn("t1"), memory("m1", "t1"), memory("m2", "t2"), turn("t2"), turn("t3")]
    assert [h.id for h in without_repeats(hits)] == ["t1", "m2", "t3"]


def test_a_memory_that_adds_a_turn_stays() -> None:
    hits = [turn("t1"), memory("m1", "t1", "t2"), memory("m0")]
    assert [h.id for h in without_repeats(hits)] == ["t1", "m1", "m0"]
