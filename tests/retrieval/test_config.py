"""Retrieval knobs: parsed and typed from the command line, combined into a grid, validated."""

from __future__ import annotations

import pytest

from stratamem.errors import InvalidInput
from stratamem.retrieval.config import RetrievalConfig, grid, parse_assignment, varying


def test_values_are_typed_like_the_knob() -> None:
    assert parse_assignment("rrf_k=15,30") == ("rrf_k", [15, 30])
    assert parse_assignment("vector_weight=0.2") == ("vector_weight", [0.2])
    assert parse_assignment("phrases=false,on") == ("phrases", [False, True])


@pytest.mark.parametrize(
    "text", ["nosuch=1", "rrf_k=abc", "phrases=maybe", "rrf_k=", "rrf_k"]
)
def test_bad_assignments_are_refused_clearly(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_assignment(text)


def test_grid_is_every_combination_without_repeats_base_first() -> None:
    base = RetrievalConfig()
    configs = grid(base, [parse_assignment("rrf_k=30,60"), parse_assignment("phrases=true,false")])
    assert len(configs) == 4
    assert configs[0] == base
    assert {c.label() for c in configs} == {
        "defaults", "phrases=false", "rrf_k=60", "rrf_k=60, phrases=false"
    }
    assert varying(configs) == ["rrf_k", "phrases"]
    assert configs[3].label(["phrases"]) == "phrases=false"


def test_grid_refuses_negative_weights() -> None:
    with pytest.raises(InvalidInput):
        grid(RetrievalConfig(), [parse_assignment("vector_weight=-0.1")])


def test_a_zero_weight_or_no_terms_turns_feedback_off() -> None:
    assert RetrievalConfig().feedback
    assert not RetrievalConfig(feedback_terms=0).feedback
    assert not RetrievalConfig(feedback_weight=0.0).feedback
    assert RetrievalConfig().weight("vector") == 0.3
    assert RetrievalConfig().weight("anything else") == 1.0


def test_feedback_words_are_bounded_by_rows_by_default_and_the_bound_is_positive() -> None:
    assert RetrievalConfig().feedback_max_rows == 500
    with pytest.raises(InvalidInput):
        RetrievalConfig(feedback_max_rows=0)
