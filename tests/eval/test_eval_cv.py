"""Leave-one-conversation-out: each fold chooses on the others and is measured on itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.eval.cv import cross_validate
from stratamem.eval.metrics import QuestionResult
from stratamem.retrieval.config import RetrievalConfig

SAMPLE = Path(__file__).parent.parent / "data" / "locomo_sample.json"
A = RetrievalConfig()
B = RetrievalConfig(rrf_k=60)


def answered(sample: str, found: bool, category: int = 4) -> QuestionResult:
    """A question whose one evidence turn is first (found) or absent from the hits."""
    return QuestionResult(
        sample_id=sample, category=category, question="q", evidence=frozenset({"D1:1"}),
        ranked=(frozenset({"D1:1" if found else "D1:2"}),), hit_chars=(10,), latency_ms=1.0,
    )


def test_each_fold_is_measured_with_the_variant_chosen_on_the_others() -> None:
    # A is perfect on s1 and s2 and fails s3; B is the reverse on s1 only.
    results = {
        A: [answered("s1", True), answered("s2", True), answered("s3", False)],
        B: [answered("s1", False), answered("s2", True), answered("s3", True)],
    }
    cv = cross_validate(results, (1, 10), 10)
    chosen = {row["held_out"]: row["chosen"] for row in cv["folds"]}
    # s1 out: on s2+s3, B (2/2) beats A (1/2); s2 out: tie 1/2 each -> A, listed first;
    # s3 out: A (2/2) beats B (1/2).
    assert chosen == {"s1": "rrf_k=60", "s2": "rrf_k=30", "s3": "rrf_k=30"}
    held_out = [row["recall_at_k"]["10"] for row in cv["folds"]]
    assert held_out == [0.0, 1.0, 0.0]  # choosing on the others costs what tuning hides
    assert cv["fold_mean"]["recall_at_k"]["10"] == pytest.approx(1 / 3, abs=1e-4)
    assert cv["all_data"]["chosen"] == "rrf_k=30"
    assert cv["all_data"]["recall_at_k"]["10"] == pytest.approx(2 / 3, abs=1e-4)
    assert [row["per_fold"] for row in cv["grid"]] == [
        {"s1": 1.0, "s2": 1.0, "s3": 0.0}, {"s1": 0.0, "s2": 1.0, "s3": 1.0}
    ]


def test_a_category_is_averaged_over_the_folds_that_have_it() -> None:
    results = {
        A: [answered("s1", True, 3), answered("s1", False, 4), answered("s2", True, 4)],
    }
    cv = cross_validate(results, (10,), 10)
    assert cv["fold_mean"]["per_category"]["3"] == {
        "recall_at_k": {"10": 1.0}, "mrr": 1.0, "folds": 1
    }
    assert cv["fold_mean"]["per_category"]["4"]["recall_at_k"]["10"] == 0.5
    assert cv["fold_sd"]["per_category"]["4"]["recall_at_k"]["10"] == pytest.approx(0.7071, 1e-3)


def two_conversations(tmp_path: Path) -> Path:
    """The invented sample twice, as two conversations."""
    sample = json.loads(SAMPLE.read_text(encoding="utf-8"))[0]
    data = [sample, {**sample, "sample_id": "sample-2"}]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run(data: Path, *args: str) -> Any:
    return CliRunner().invoke(
        cli, ["--embedder", "none", "eval", "locomo", "--data", str(data), *args]
    )


def test_cli_cross_validates_a_grid(tmp_path: Path) -> None:
    result = run(two_conversations(tmp_path), "--cv", "--vary", "speaker_factor=0.8,1",
                 "--vary", "phrases=true,false", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    cv = report["cv"]
    assert cv["variants"] == 4
    assert [row["held_out"] for row in cv["folds"]] == ["sample-1", "sample-2"]
    assert all(row["questions"] == 9 for row in cv["folds"])
    # The two conversations are the same, so every fold measures what all data does.
    assert cv["fold_mean"]["recall_at_k"]["10"] == cv["all_data"]["recall_at_k"]["10"]


def test_cli_table_and_set_knobs(tmp_path: Path) -> None:
    result = run(two_conversations(tmp_path), "--cv", "--set", "feedback_terms=0")
    assert result.exit_code == 0, result.output
    assert "fold mean ± sd" in result.output
    assert "base: feedback_terms=0" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--vary", "rrf_k=30,60"), "--vary needs --cv"),
        (("--cv", "--set", "rrf_k=30,60"), "takes one value"),
        (("--cv", "--set", "nosuch=1"), "unknown retrieval knob"),
        (("--cv", "--select-k", "7"), "--select-k 7"),
    ],
)
def test_cli_refuses_what_it_cannot_measure(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = run(two_conversations(tmp_path), *args)
    assert result.exit_code != 0
    assert message in result.output


def test_cv_needs_two_conversations() -> None:
    result = run(SAMPLE, "--cv")
    assert result.exit_code != 0
    assert "at least two conversations" in result.output
