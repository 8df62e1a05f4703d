"""Reciprocal rank fusion: order and determinism."""

from __future__ import annotations

import pytest

from stratamem.domain import Layer
from stratamem.retrieval.fusion import Fusion, reciprocal_rank_fusion
from stratamem.store.core.port import Candidate


def ranked(*ids: str) -> list[Candidate]:
    return [Candidate(i, 1.0 / (n + 1)) for n, i in enumerate(ids)]


def test_item_found_by_both_retrievers_beats_items_found_by_one() -> None:
    fused = reciprocal_rank_fusion(
        {(Layer.L0, "bm25"): ranked("a", "both"), (Layer.L0, "vector"): ranked("b", "both")}
    )
    assert fused[0].id == "both"
    assert fused[0].score == pytest.approx(2 / 62)
    assert fused[0].ranks == {"L0:bm25": 2, "L0:vector": 2}


def test_scores_follow_one_over_k_plus_rank() -> None:
    fused = reciprocal_rank_fusion({(Layer.L1, "bm25"): ranked("x", "y", "z")}, k=10)
    assert [(f.id, round(f.score, 6)) for f in fused] == [
        ("x", round(1 / 11, 6)),
        ("y", round(1 / 12, 6)),
        ("z", round(1 / 13, 6)),
    ]


def test_same_id_in_two_layers_stays_two_results() -> None:
    fused = reciprocal_rank_fusion(
        {(Layer.L0, "bm25"): ranked("same"), (Layer.L1, "bm25"): ranked("same")}
    )
    assert sorted(f.layer.value for f in fused) == ["L0", "L1"]


def test_ties_break_by_best_rank_then_id_deterministically() -> None:
    lists = {(Layer.L0, "bm25"): ranked("b"), (Layer.L0, "vector"): ranked("a")}
    assert [f.id for f in reciprocal_rank_fusion(lists)] == ["a", "b"]


def test_weights_scale_a_retriever() -> None:
    lists = {(Layer.L0, "bm25"): ranked("lex"), (Layer.L0, "vector"): ranked("sem")}
    fused = reciprocal_rank_fusion(lists, weights={(Layer.L0, "vector"): 2.0})
    assert [f.id for f in fused] == ["sem", "lex"]


def test_a_fusion_ranked_then_added_to_ranks_as_one_fusion_of_every_list() -> None:
    """The search ranks its first lists, adds the feedback lists and ranks again: the second
    answer must be the one fusion of all lists would give, score for score."""
    first = {(Layer.L0, "bm25"): ranked("a", "b", "c"), (Layer.L0, "vector"): ranked("c", "d")}
    later = {(Layer.L0, "feedback"): ranked("d", "e", "a"), (Layer.L1, "bm25"): ranked("a")}
    weights = {(Layer.L0, "vector"): 0.3, (Layer.L0, "feedback"): 0.3}
    fusion = Fusion(k=30)
    for (layer, retriever), candidates in first.items():
        fusion.add(layer, retriever, candidates, weights.get((layer, retriever), 1.0))
    assert [f.id for f in fusion.ranked()] == ["c", "a", "b", "d"]
    for (layer, retriever), candidates in later.items():
        fusion.add(layer, retriever, candidates, weights.get((layer, retriever), 1.0))
    every = reciprocal_rank_fusion({**first, **later}, k=30, weights=weights)
    assert [(f.layer, f.id, f.score, f.ranks, f.scores) for f in fusion.ranked()] == [
        (f.layer, f.id, f.score, f.ranks, f.scores) for f in every
    ]
