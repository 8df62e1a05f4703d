"""`--qa`: answers from recalled context, judged by an LLM, on a scripted endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.eval.qa import ANSWER_STAGE, JUDGE_STAGE, locomo_f1, token_f1
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

SAMPLE = Path(__file__).parent.parent / "data" / "locomo_sample.json"


def run_qa() -> Any:
    return CliRunner().invoke(
        cli, ["--embedder", "none", "eval", "locomo", "--data", str(SAMPLE), "--qa", "--json"]
    )


def answer(request: RecordedRequest) -> Reply:
    prompt = request.messages[-1]["content"]
    known = "Question: What did Biscuit steal" in prompt and "rye bread" in prompt
    text = "a loaf of rye bread" if known else "I do not know"
    return Reply.text(text, prompt_tokens=100, completion_tokens=5)


def judge(request: RecordedRequest) -> Reply:
    prompt = request.messages[-1]["content"]
    label = "correct" if "Generated answer: a loaf of rye bread" in prompt else "WRONG"
    return Reply.json({"label": label}, prompt_tokens=50, completion_tokens=3)


def test_qa_answers_from_recalled_context_and_is_judged(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted")
    scripted_llm.on(ANSWER_STAGE, answer)
    scripted_llm.on(JUDGE_STAGE, judge)
    result = run_qa()
    assert result.exit_code == 0, result.output
    qa = json.loads(result.output)["qa"]
    assert qa["questions"] == 9
    assert qa["judge_score"] == round(1 / 9, 4)  # only the rye bread question is answerable
    assert qa["per_category"]["4"]["judge_score"] > 0
    assert qa["answer_tokens_per_query"] == 105.0
    assert qa["judge_tokens_per_query"] == 53.0
    asked = scripted_llm.calls(ANSWER_STAGE)
    assert any("Biscuit" in r.messages[-1]["content"] for r in asked)  # the recalled context


def test_qa_without_an_endpoint_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATAMEM_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("STRATAMEM_LLM_MODEL", raising=False)
    result = run_qa()
    assert result.exit_code == 5
    assert "STRATAMEM_LLM_BASE_URL" in result.output


def test_token_f1_ignores_case_punctuation_and_articles() -> None:
    assert token_f1("The Rye bread!", "rye bread") == 1.0
    assert token_f1("bread", "rye bread") == pytest.approx(2 / 3)
    assert token_f1("nothing alike", "rye bread") == 0.0


def test_locomo_f1_scores_lists_part_by_part_and_keeps_the_first_open_domain_part() -> None:
    assert locomo_f1("turtles, a dog", "a dog, turtles", 1) == 1.0
    assert locomo_f1("turtles", "a dog, turtles", 1) == 0.5
    assert locomo_f1("likely yes", "likely yes; because he rows", 3) == 1.0


def test_llm_mode_runs_the_layers_through_the_endpoint(
    scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted")
    install_layer_handlers(scripted_llm)
    result = CliRunner().invoke(
        cli,
        ["--embedder", "none", "eval", "locomo", "--data", str(SAMPLE), "--mode", "llm", "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["mode"] == "llm" and report["questions"] == 9
    assert scripted_llm.calls("L1")
    assert "qa" not in report  # no --qa: nothing answered
    assert report["llm_usage"]["L1"]["calls"] >= 1
