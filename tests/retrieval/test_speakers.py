"""The turns of the one speaker a query names are preferred."""

from __future__ import annotations

from stratamem.domain import Hit, Layer
from stratamem.retrieval.speakers import named_speakers, prefer_named_speaker


def hit(hit_id: str, speaker: str | None, score: float, layer: Layer = Layer.L0) -> Hit:
    return Hit(id=hit_id, layer=layer, text="x", session="s", score=score, speaker=speaker)


HITS = [hit("a", "Melanie", 1.0), hit("b", "Caroline", 0.9), hit("m", None, 0.85, Layer.L1)]


def test_the_named_speakers_turn_moves_up() -> None:
    ranked = prefer_named_speaker("What did Caroline's mentor say?", HITS)
    assert [h.id for h in ranked] == ["b", "m", "a"]
    assert ranked[2].score == 0.8


def test_no_name_or_two_names_change_nothing() -> None:
    assert prefer_named_speaker("What did they research?", HITS) == HITS
    assert prefer_named_speaker("Did Caroline and Melanie both paint?", HITS) == HITS


def test_names_match_whole_words_of_every_part() -> None:
    hits = [hit("a", "Ann Lee", 1.0), hit("b", "Annie", 1.0)]
    assert named_speakers("What did ann lee say?", hits) == {"Ann Lee"}
    assert named_speakers("What did Ann say?", hits) == set()
