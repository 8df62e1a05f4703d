"""The best hit of each session the hits point at is lifted by its session's rank."""

from __future__ import annotations

import pytest

from stratamem.domain import Hit, Layer
from stratamem.errors import InvalidInput
from stratamem.retrieval.config import RetrievalConfig
from stratamem.retrieval.sessions import session_ranked


def hit(hit_id: str, session: str | None, score: float) -> Hit:
    return Hit(id=hit_id, layer=Layer.L0, text="x", session=session, score=score)


# Session s1 has the three best hits; s2's best hit is fifth, below a memory of no session.
HITS = [hit("a1", "s1", 0.030), hit("a2", "s1", 0.029), hit("a3", "s1", 0.0285),
        hit("m", None, 0.0282), hit("b1", "s2", 0.028), hit("b2", "s2", 0.020)]  # fmt: skip


def test_a_second_sessions_best_hit_passes_the_first_sessions_repeats() -> None:
    ranked = session_ranked(HITS, weight=0.05, rrf_k=30)
    assert [h.id for h in ranked] == ["a1", "b1", "a2", "a3", "m", "b2"]
    assert ranked[0].score == pytest.approx(0.030 + 0.05 / 31)
    assert ranked[1].score == pytest.approx(0.028 + 0.05 / 32)
    assert ranked[1].ranks == {"L0:session": 2}
    assert ranked[1].retriever_scores == {"L0:session": pytest.approx(0.048)}
    assert RetrievalConfig(session_weight=0.05).weight("session") == 0.05


def test_no_hit_is_demoted_and_hits_without_a_session_keep_their_score() -> None:
    before = {h.id: h.score for h in HITS}
    after = {h.id: h.score for h in session_ranked(HITS, weight=0.05, rrf_k=30)}
    assert all(after[i] >= before[i] for i in before)
    assert after["m"] == before["m"] and after["a2"] == before["a2"]


def test_only_the_first_depth_hits_are_summed() -> None:
    ranked = session_ranked(HITS, weight=0.05, rrf_k=30, depth=3)
    assert {h.id: h.score for h in ranked}["b1"] == 0.028


def test_weight_zero_changes_nothing() -> None:
    assert session_ranked(HITS, weight=0.0, rrf_k=30) == HITS
    assert session_ranked([], weight=0.05, rrf_k=30) == []


def test_a_negative_depth_is_refused() -> None:
    with pytest.raises(InvalidInput):
        RetrievalConfig(session_depth=-1)
