"""`Hit.scored` is `dataclasses.replace` of the score (and ranks), field for field."""

from __future__ import annotations

from dataclasses import fields, replace

from stratamem.domain import Hit, Layer, MemoryType

EVERY_FIELD = {
    "id": "h1",
    "layer": Layer.L1,
    "text": "Nate has turtles",
    "session": "s1",
    "score": 0.5,
    "timestamp": 1.7e9,
    "speaker": "Nate",
    "memory_type": MemoryType.EPISODIC,
    "source_turn_ids": ("t1", "t2"),
    "ranks": {"L1:bm25": 3},
    "retriever_scores": {"L1:bm25": 4.2},
}


def test_every_field_of_a_hit_is_set_here() -> None:
    assert set(EVERY_FIELD) == {f.name for f in fields(Hit)}  # a new field: add it above


def test_scored_keeps_every_other_field() -> None:
    hit = Hit(**EVERY_FIELD)  # type: ignore[arg-type]
    assert hit.scored(0.9) == replace(hit, score=0.9)
    ranks, scores = {"L1:vector": 1}, {"L1:vector": 0.8}
    assert hit.scored(0.7, ranks, scores) == replace(
        hit, score=0.7, ranks=ranks, retriever_scores=scores
    )
