"""Endpoint profiles through the scripted server acting as llama.cpp, Ollama, OpenAI or a plain
server: what each request carries, what is learned from a refusal, and what is not."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from stratamem.llm import LLMClient, LLMHTTPError, LLMOutputInvalid, LLMSettings, StageSettings
from stratamem.llm.wire import compact_schema
from stratamem.testing import Endpoint, RecordedRequest, RecordingSleep, Reply, ScriptedLLM

MESSAGES = [{"role": "system", "content": "Extract."}, {"role": "user", "content": "hi"}]
VALID = {"facts": ["likes tea"]}


class Facts(BaseModel):
    facts: list[str]


def settings(server: ScriptedLLM, **options: object) -> LLMSettings:
    values = {"base_url": server.base_url, "model": "m", "timeout_s": 10.0, **options}
    return LLMSettings.model_validate(values)


def answers_only(form: str | None) -> object:
    """A model whose output the format field constrains: JSON when the server applied the form
    asked for, prose when the server ignored it (as Ollama ignores a form it does not take)."""

    def handler(request: RecordedRequest) -> Reply:
        if request.form == form:
            return Reply.json(VALID)
        return Reply.text("Sure! The user likes tea.")

    return handler


async def test_llamacpp_refuses_openai_with_a_500_and_is_learned_once() -> None:
    sleep = RecordingSleep()
    with ScriptedLLM(endpoint=Endpoint.llamacpp()) as server:
        server.handler = lambda request: Reply.json(VALID)
        async with LLMClient(settings(server), sleep=sleep) as client:
            for _ in range(3):
                assert await client.complete_json("L1", MESSAGES, Facts) == Facts(**VALID)
            assert client.profile_for(client.settings.for_stage("L1")) == "llamacpp"
        forms = [r.form for r in server.calls()]
    assert forms == ["openai", "llamacpp", "llamacpp", "llamacpp"]
    assert sleep.delays == []  # the 500 naming response_format is a refusal, not retried
    request = server.calls()[1]
    wanted = {"type": "json_object", "schema": compact_schema(Facts)}
    assert request.body["response_format"] == wanted


@pytest.mark.parametrize(
    ("profile", "endpoint", "form"),
    [
        ("openai", Endpoint.openai(), "openai"),
        ("llamacpp", Endpoint.llamacpp(), "llamacpp"),
        ("ollama", Endpoint.ollama(), "ollama"),
        ("prompt", Endpoint.plain(), None),
    ],
)
async def test_a_configured_profile_sends_its_form_from_the_first_call(
    profile: str, endpoint: Endpoint, form: str | None
) -> None:
    with ScriptedLLM(endpoint=endpoint) as server:
        server.handler = answers_only(form)  # type: ignore[assignment]
        async with LLMClient(settings(server, structured=profile)) as client:
            assert await client.complete_json("L1", MESSAGES, Facts) == Facts(**VALID)
        (request,) = server.calls()
    assert request.form == form
    if profile == "ollama":
        assert request.body["format"] == compact_schema(Facts)
        assert "response_format" not in request.body
    hinted = "JSON schema" in request.system_prompt
    assert hinted is (profile == "prompt")  # the schema goes into the prompt only there


async def test_ollama_ignores_what_it_does_not_take_so_it_must_be_configured() -> None:
    """No refusal to learn from: under `auto` the model answers prose, the repair round too,
    and the call fails as the model's output (recorded, retryable); `structured=ollama` works."""
    with ScriptedLLM(endpoint=Endpoint.ollama()) as server:
        server.handler = answers_only("ollama")  # type: ignore[assignment]
        async with LLMClient(settings(server)) as client:
            with pytest.raises(LLMOutputInvalid):
                await client.complete_json("L1", MESSAGES, Facts)
        async with LLMClient(settings(server, structured="ollama")) as client:
            assert await client.complete_json("L1", MESSAGES, Facts) == Facts(**VALID)


async def test_a_configured_profile_refused_is_an_http_error_naming_the_setting() -> None:
    with ScriptedLLM(endpoint=Endpoint.llamacpp()) as server:
        async with LLMClient(settings(server, structured="openai")) as client:
            with pytest.raises(LLMHTTPError, match="STRATAMEM_LLM_STRUCTURED") as caught:
                await client.complete_json("L1", MESSAGES, Facts)
        assert len(server.calls()) == 1  # no fallback: the setting is the user's
    assert caught.value.status == 500
    assert not isinstance(caught.value, LLMOutputInvalid)  # not the model's fault


async def test_a_plain_server_ends_with_the_prompt_profile() -> None:
    with ScriptedLLM(endpoint=Endpoint.plain()) as server:
        server.handler = lambda request: Reply.json(VALID)
        async with LLMClient(settings(server)) as client:
            await client.complete_json("L1", MESSAGES, Facts)
            await client.complete_json("L1", MESSAGES, Facts)
        forms = [r.form for r in server.calls()]
    assert forms == ["openai", "llamacpp", None, None]


async def test_what_is_learned_is_kept_per_endpoint() -> None:
    with (
        ScriptedLLM(endpoint=Endpoint.llamacpp()) as llama,
        ScriptedLLM(endpoint=Endpoint.openai()) as hosted,
    ):
        for server in (llama, hosted):
            server.handler = lambda request: Reply.json(VALID)
        stages = {"L2": StageSettings(base_url=hosted.base_url)}
        async with LLMClient(settings(llama, stages=stages)) as client:
            await client.complete_json("L1", MESSAGES, Facts)
            await client.complete_json("L2", MESSAGES, Facts)
        assert [r.form for r in llama.calls()] == ["openai", "llamacpp"]
        assert [r.form for r in hosted.calls()] == ["openai"]


def test_the_profile_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_STRUCTURED", "llamacpp")
    assert LLMSettings().structured_profile == "llamacpp"
    monkeypatch.setenv("STRATAMEM_LLM_STRUCTURED", "grammar")
    with pytest.raises(ValueError, match="structured"):
        LLMSettings()
    monkeypatch.setenv("STRATAMEM_LLM_STRUCTURED", "auto")
    monkeypatch.setenv("STRATAMEM_LLM_JSON_SCHEMA", "false")
    assert LLMSettings().structured_profile == "prompt"
