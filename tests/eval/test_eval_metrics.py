"""Recall, reciprocal rank and percentiles on hand-made rankings."""

from __future__ import annotations

from stratamem.eval.metrics import QuestionResult, percentile, summarise


def result(evidence: set[str], ranked: list[set[str]], category: int = 4) -> QuestionResult:
    return QuestionResult(
        sample_id="s",
        category=category,
        question="q",
        evidence=frozenset(evidence),
        ranked=tuple(frozenset(r) for r in ranked),
        hit_chars=tuple(10 for _ in ranked),
        latency_ms=2.0,
    )


def test_memory_hit_counts_for_every_turn_of_its_provenance() -> None:
    r = result({"D1:1", "D1:2"}, [{"D9:9"}, {"D1:1", "D1:2"}])
    assert r.recall_at(1) == 0.0
    assert r.recall_at(2) == 1.0
    assert r.reciprocal_rank() == 0.5


def test_recall_is_the_fraction_of_evidence_found() -> None:
    r = result({"D1:1", "D1:2", "D1:3", "D1:4"}, [{"D1:1"}, {"D5:5"}, {"D1:3"}])
    assert r.recall_at(3) == 0.5
    assert r.reciprocal_rank() == 1.0
    assert r.context_chars(2) == 20


def test_nothing_found_scores_zero() -> None:
    r = result({"D1:1"}, [])
    assert r.recall_at(10) == 0.0
    assert r.reciprocal_rank() == 0.0


def test_summary_has_every_category_even_when_empty() -> None:
    summary = summarise([result({"a"}, [{"a"}], category=2)], (1, 5))
    assert summary["per_category"]["2"]["recall_at_k"] == {"1": 1.0, "5": 1.0}
    assert summary["per_category"]["3"]["questions"] == 0
    assert summary["per_category"]["3"]["recall_at_k"] == {"1": 0.0, "5": 0.0}


def test_percentile_of_nothing_is_zero() -> None:
    assert percentile([], 95) == 0.0
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0
