"""`stratamem llm check` against the scripted server acting as real endpoints."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.testing import Endpoint, RecordedRequest, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply


def check(server_url: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", server_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted-chat")
    result = CliRunner().invoke(cli, ["llm", "check", *args])
    return result.exit_code, result.output


def test_a_llamacpp_server_is_usable_and_its_profile_is_learned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ScriptedLLM(endpoint=Endpoint.llamacpp()) as server:
        install_layer_handlers(server)
        server.on("L1", l1_or_text)
        code, out = check(server.base_url, monkeypatch, "--json")
    report = json.loads(out)
    assert code == 0 and report["usable"] is True
    assert report["profile"] == "llamacpp" and report["structured"] == "auto"
    assert report["model_listed"] is True
    assert report["text_latency_s"] >= 0 and report["extraction_latency_s"] >= 0
    assert report["memories"] and report["problems"] == []
    assert all("max_tokens" in r.body for r in server.calls(path="/v1/chat/completions"))


def test_an_endpoint_whose_replies_are_prose_is_not_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ScriptedLLM() as server:
        server.handler = lambda request: Reply.text("Sure! Maria teaches piano in Lisbon.")
        code, out = check(server.base_url, monkeypatch)
    assert code == 1
    assert "NOT usable" in out and "extraction: " in out and "chat       ok" in out


def test_an_unreachable_endpoint_is_not_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedLLM() as server:
        url = server.base_url
    code, out = check(url, monkeypatch)
    assert code == 1 and "LLMUnavailable" in out and "NOT usable" in out


def l1_or_text(request: RecordedRequest) -> Reply:
    """Stage L1: the plain chat probe (no format, no turns) gets text, extractions JSON."""
    if request.form is None and "NEW turns" not in str(request.messages):
        return Reply.text("ok")
    return l1_reply(request)


def test_a_chatty_model_is_judged_by_its_extraction_with_the_profiles_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chat probe cut off at its few tokens is no fault: the extraction round trip decides,
    and it runs with the llamacpp profile's bounds (a small local model's)."""
    monkeypatch.setenv("STRATAMEM_LLM_STRUCTURED", "llamacpp")
    monkeypatch.delenv("STRATAMEM_LLM_TIMEOUT_S", raising=False)
    monkeypatch.delenv("STRATAMEM_LLM_MAX_TOKENS", raising=False)
    with ScriptedLLM(endpoint=Endpoint.llamacpp()) as server:
        install_layer_handlers(server)

        def chatty(request: RecordedRequest) -> Reply:
            if request.form is None and "NEW turns" not in str(request.messages):
                return Reply.truncated("Of course! Here is a long and friendly answer")
            return l1_reply(request)

        server.on("L1", chatty)
        code, out = check(server.base_url, monkeypatch, "--json")
        bodies = [r.body for r in server.calls(path="/v1/chat/completions")]
    report = json.loads(out)
    assert code == 0 and report["usable"] is True, out
    assert report["max_tokens"] == 512 and report["timeout_s"] == 600
    assert any("longer than" in note for note in report["notes"])
    assert report["memories"] and report["refused"] == []
    extraction = next(b for b in bodies if "NEW turns" in json.dumps(b))
    assert extraction["max_tokens"] == 512
