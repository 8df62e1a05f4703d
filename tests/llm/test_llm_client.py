"""The LLM client against the scripted OpenAI-compatible server: real HTTP, no mocks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import BaseModel, Field, RootModel, SecretStr, ValidationError

from stratamem.errors import ConfigError, LLMError
from stratamem.llm import (
    LLM,
    LLMClient,
    LLMEmptyReply,
    LLMHTTPError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMReplyTruncated,
    LLMSettings,
    LLMTimeout,
    LLMUnavailable,
    StageSettings,
)
from stratamem.llm.wire import compact_schema
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM

VALID = {"facts": [{"content": "likes green tea", "priority": 60}]}
MESSAGES = [
    {"role": "system", "content": "Extract facts about the user."},
    {"role": "user", "content": "I love green tea."},
]


class Fact(BaseModel):
    content: str
    priority: int = Field(ge=0, le=100)


class Facts(BaseModel):
    facts: list[Fact]


def settings_for(server: ScriptedLLM, **options: object) -> LLMSettings:
    values: dict[str, object] = {
        "base_url": server.base_url,
        "model": "scripted-chat",
        "timeout_s": 10.0,
        **options,
    }
    return LLMSettings.model_validate(values)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def llm(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> AsyncIterator[LLMClient]:
    async with LLMClient(settings_for(scripted_llm), sleep=sleep) as client:
        yield client


def test_the_client_satisfies_the_contract(llm: LLMClient) -> None:
    contract: LLM = llm
    assert contract.usage is llm.usage


# -- JSON output ----------------------------------------------------------------------------


async def test_json_schema_response_format(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.json(VALID))
    facts = await llm.complete_json("L1", MESSAGES, Facts)
    assert facts == Facts.model_validate(VALID)
    (request,) = scripted_llm.calls()
    fmt = request.body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Facts"
    assert fmt["json_schema"]["schema"] == compact_schema(Facts)
    assert request.body["messages"] == MESSAGES
    assert request.body["model"] == "scripted-chat"
    assert request.stage == "L1"


async def test_root_model_schemas(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.text('[{"content": "likes tea", "priority": 5}]'))
    facts = await llm.complete_json("L1", MESSAGES, RootModel[list[Fact]])
    assert facts.root == [Fact(content="likes tea", priority=5)]
    name = scripted_llm.calls()[0].body["response_format"]["json_schema"]["name"]
    assert name == "RootModel_list_Fact__"


async def test_falls_back_when_response_format_is_rejected(sleep: RecordingSleep) -> None:
    with ScriptedLLM(accept_response_format=False) as server:
        server.push(Reply.json(VALID), Reply.json(VALID))
        async with LLMClient(settings_for(server), sleep=sleep) as client:
            assert await client.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)
            assert await client.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)
        requests = server.calls()
    # openai's form, then llama.cpp's, are refused once each; the prompt-only profile is
    # remembered for the endpoint and model
    forms = [r.body.get("response_format", {}).get("type") for r in requests]
    assert forms == ["json_schema", "json_object", None, None]
    hinted = requests[2].body["messages"]
    assert len(hinted) == 2
    assert "JSON schema" in hinted[0]["content"]
    assert '"facts"' in hinted[0]["content"]
    assert sleep.delays == []


async def test_fallback_on_a_scripted_refusal(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.unsupported_response_format(), Reply.json(VALID))
    assert await llm.complete_json("L2", MESSAGES, Facts) == Facts.model_validate(VALID)
    assert llm.profile_for(llm.settings.for_stage("L2")) == "llamacpp"
    assert llm.endpoint_takes_schema(llm.settings.for_stage("L2"))


async def test_schema_format_can_be_switched_off(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.push(Reply.json(VALID))
    async with LLMClient(settings_for(scripted_llm, json_schema=False)) as client:
        await client.complete_json("L1", [{"role": "user", "content": "hi"}], Facts)
    (request,) = scripted_llm.calls()
    assert "response_format" not in request.body
    assert request.body["messages"][0]["role"] == "system"  # the schema hint, put in front


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"facts": [{"content": "likes green tea", "priority": 60}]}\n```',
        '  ```\n{"facts": [{"content": "likes green tea", "priority": 60}]}\n```\n',
    ],
    ids=["fenced", "bare-fence"],
)
async def test_reads_one_fenced_value(
    scripted_llm: ScriptedLLM, llm: LLMClient, reply: str
) -> None:
    scripted_llm.push(Reply.text(reply))
    assert await llm.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)
    assert len(scripted_llm.calls()) == 1


@pytest.mark.parametrize(
    "reply",
    [
        'Sure! Here is the JSON:\n{"facts": [{"content": "likes green tea", "priority": 60}]}',
        'Result [1]: {"facts": [{"content": "likes green tea", "priority": 60}]} Hope it helps.',
        '```\n{"facts": [{"content": "likes green tea", "priority": 60}]}\n```\nDone.',
        'The user said {"facts": []} earlier. {"facts": [{"content": "x", "priority": 1}]}',
    ],
    ids=["leading-prose", "prose-around", "fence-then-prose", "two-values"],
)
async def test_json_among_prose_is_never_read_it_goes_to_repair(
    scripted_llm: ScriptedLLM, llm: LLMClient, reply: str
) -> None:
    scripted_llm.push(Reply.text(reply), Reply.json(VALID))
    assert await llm.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)
    _, repair = scripted_llm.calls()
    assert "one JSON value and nothing else" in repair.messages[-1]["content"]
    assert llm.usage.outcomes()["L1"]["repaired"] == 1


async def test_repair_round_succeeds(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    bad = {"facts": [{"content": "likes green tea", "priority": 500}]}
    scripted_llm.push(Reply.json(bad), Reply.json(VALID))
    assert await llm.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)
    _, repair = scripted_llm.calls()
    messages = repair.body["messages"]
    assert messages[:2] == MESSAGES
    assert messages[2] == {"role": "assistant", "content": Reply.json(bad).content}
    assert messages[3]["role"] == "user"
    assert "priority" in messages[3]["content"]
    assert "less than or equal to 100" in messages[3]["content"]


async def test_repair_round_fails_and_keeps_the_raw_replies(
    scripted_llm: ScriptedLLM, llm: LLMClient
) -> None:
    scripted_llm.push(Reply.text("I cannot do that."), Reply.text('{"facts": "none"}'))
    with pytest.raises(LLMOutputInvalid) as caught:
        await llm.complete_json("L1", MESSAGES, Facts)
    error = caught.value
    assert error.raw == '{"facts": "none"}'
    assert error.raws == ("I cannot do that.", '{"facts": "none"}')
    assert isinstance(error.__cause__, ValidationError)
    assert isinstance(error, LLMError)
    assert len(scripted_llm.calls()) == 2


async def test_a_reply_cut_off_by_the_length_limit_is_never_read(
    scripted_llm: ScriptedLLM, llm: LLMClient
) -> None:
    # A cut-off reply holding a complete inner object must not parse as an answer, nor be repaired
    # (the repair would be cut off too): the caller retries with a smaller input.
    cut = '{"facts": [{"content": "likes green tea", "priority": 60}, {"con'
    scripted_llm.push(Reply.truncated(cut))
    with pytest.raises(LLMReplyTruncated) as caught:
        await llm.complete_json("L1", MESSAGES, Facts)
    assert caught.value.raw.startswith('{"facts"')
    assert isinstance(caught.value, LLMOutputInvalid)
    scripted_llm.push(Reply.truncated("The user likes"))
    with pytest.raises(LLMReplyTruncated):
        await llm.complete_text("L1", MESSAGES)
    assert len(scripted_llm.calls()) == 2


async def test_empty_replies(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.empty(), Reply.empty(null=True))
    with pytest.raises(LLMEmptyReply) as caught:
        await llm.complete_json("L1", MESSAGES, Facts)
    assert caught.value.raws == ("", "")
    scripted_llm.push(Reply.empty())
    with pytest.raises(LLMEmptyReply):
        await llm.complete_text("L3", MESSAGES)


async def test_empty_reply_then_repair(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.empty(), Reply.json(VALID))
    assert await llm.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)


async def test_a_body_that_is_not_a_completion(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.raw("<html>gateway says hi</html>"))
    with pytest.raises(LLMOutputInvalid) as caught:
        await llm.complete_text("L1", MESSAGES)
    assert caught.value.raw == "<html>gateway says hi</html>"
    assert isinstance(caught.value.__cause__, ValidationError)


async def test_complete_text(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.text("A short summary."))
    assert await llm.complete_text("offload-l1", MESSAGES, max_tokens=50) == "A short summary."
    (request,) = scripted_llm.calls()
    assert request.body["max_tokens"] == 50
    assert "response_format" not in request.body
    assert request.stage == "offload-l1"


# -- failures, retries, cancellation --------------------------------------------------------


async def test_timeout(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    scripted_llm.push(Reply.held())
    async with LLMClient(settings_for(scripted_llm, timeout_s=0.2), sleep=sleep) as client:
        with pytest.raises(LLMTimeout) as caught:
            await client.complete_text("L1", MESSAGES)
    assert isinstance(caught.value.__cause__, httpx.TimeoutException | TimeoutError)
    assert sleep.delays == []  # timeouts are the pipeline's to retry
    assert await scripted_llm.until_disconnected()  # the request was closed, not left running


async def test_server_error_retried_then_succeeds(
    scripted_llm: ScriptedLLM, llm: LLMClient, sleep: RecordingSleep
) -> None:
    scripted_llm.push(Reply.error(500), Reply.error(502), Reply.json(VALID))
    assert await llm.complete_json("L1", MESSAGES, Facts) == Facts.model_validate(VALID)
    assert sleep.delays == [1.0, 2.0]
    assert len(scripted_llm.calls()) == 3


async def test_rate_limit_honours_retry_after(
    scripted_llm: ScriptedLLM, llm: LLMClient, sleep: RecordingSleep
) -> None:
    scripted_llm.push(Reply.rate_limited(17), Reply.text("ok"))
    assert await llm.complete_text("L1", MESSAGES) == "ok"
    assert sleep.delays == [17.0]


async def test_retry_after_beyond_the_limit(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push(Reply.rate_limited(600))
    settings = settings_for(scripted_llm, max_retry_delay_s=30)
    async with LLMClient(settings, sleep=sleep) as client:
        with pytest.raises(LLMRateLimited) as caught:
            await client.complete_text("L1", MESSAGES)
    assert caught.value.status == 429
    assert caught.value.retry_after_s == 600  # for the pipeline to wait that long
    assert isinstance(caught.value, LLMHTTPError)
    assert sleep.delays == []


async def test_rate_limited_without_retry_after_and_other_errors(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push(Reply.error(429), Reply.error(503), Reply.error(400))
    async with LLMClient(settings_for(scripted_llm, max_attempts=1), sleep=sleep) as client:
        with pytest.raises(LLMRateLimited) as limited:
            await client.complete_text("L1", MESSAGES)
        with pytest.raises(LLMHTTPError) as unavailable:
            await client.complete_text("L1", MESSAGES)
        with pytest.raises(LLMHTTPError) as refused:
            await client.complete_text("L1", MESSAGES)
    assert limited.value.retry_after_s is None
    assert not isinstance(unavailable.value, LLMRateLimited)  # a 503 that did not ask to wait
    assert refused.value.status == 400 and not isinstance(refused.value, LLMRateLimited)


async def test_retries_are_bounded(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    scripted_llm.push(*[Reply.error(503)] * 5)
    async with LLMClient(settings_for(scripted_llm, max_attempts=3), sleep=sleep) as client:
        with pytest.raises(LLMHTTPError) as caught:
            await client.complete_text("L1", MESSAGES)
    assert caught.value.status == 503
    assert len(scripted_llm.calls()) == 3
    assert sleep.delays == [1.0, 2.0]


async def test_client_errors_are_not_retried(
    scripted_llm: ScriptedLLM, llm: LLMClient, sleep: RecordingSleep
) -> None:
    scripted_llm.push(Reply.error(400, "context length exceeded"))
    with pytest.raises(LLMHTTPError, match="context length exceeded"):
        await llm.complete_json("L1", MESSAGES, Facts)
    assert len(scripted_llm.calls()) == 1
    assert sleep.delays == []


async def test_cancellation_stops_the_http_call(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(Reply.held(Reply.json(VALID)))
    task = asyncio.create_task(llm.complete_json("L1", MESSAGES, Facts))
    assert await scripted_llm.until_held()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await scripted_llm.until_disconnected()  # the server saw the connection close


async def test_unreachable_endpoint(sleep: RecordingSleep) -> None:
    with ScriptedLLM() as server:
        settings = settings_for(server)
    async with LLMClient(settings, sleep=sleep) as client:
        with pytest.raises(LLMUnavailable) as caught:
            await client.complete_text("L1", MESSAGES)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


# -- settings per stage, usage --------------------------------------------------------------


async def test_stage_overrides(scripted_llm: ScriptedLLM) -> None:
    stages = {"L1": StageSettings(model="big-model", api_key=SecretStr("sk-l1"), temperature=0.7)}
    scripted_llm.push(Reply.text("one"), Reply.text("two"))
    async with LLMClient(settings_for(scripted_llm, stages=stages)) as client:
        await client.complete_text("L1", MESSAGES)
        await client.complete_text("L2", MESSAGES)
    l1, l2 = scripted_llm.calls()
    assert (l1.body["model"], l1.body["temperature"]) == ("big-model", 0.7)
    assert l1.headers["authorization"] == "Bearer sk-l1"
    assert (l2.body["model"], l2.body["temperature"]) == ("scripted-chat", 0.0)
    assert "authorization" not in l2.headers


async def test_unconfigured_stage() -> None:
    async with LLMClient(LLMSettings(base_url=None, model=None)) as client:
        with pytest.raises(ConfigError, match="STRATAMEM_LLM_BASE_URL"):
            await client.complete_text("L1", MESSAGES)


async def test_usage_is_counted_per_stage(scripted_llm: ScriptedLLM, llm: LLMClient) -> None:
    scripted_llm.push(
        Reply.json(VALID, prompt_tokens=120, completion_tokens=30),
        Reply.error(500),
        Reply.text("summary", prompt_tokens=40, completion_tokens=5),
        Reply.text("x" * 40),
    )
    await llm.complete_json("L1", MESSAGES, Facts)
    await llm.complete_text("L2", MESSAGES)
    await llm.complete_text("L3", MESSAGES)
    chars = sum(len(m["content"]) for m in MESSAGES)
    expected = {
        "L1": {"calls": 1, "prompt_tokens": 120, "completion_tokens": 30},
        "L2": {"calls": 2, "prompt_tokens": 40, "completion_tokens": 5},
        "L3": {"calls": 1, "prompt_tokens": -(-chars // 4), "completion_tokens": 10},
    }
    assert llm.usage.snapshot() == expected
    assert scripted_llm.usage() == expected


async def test_usage_is_estimated_when_the_server_omits_it(
    scripted_llm: ScriptedLLM, llm: LLMClient
) -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": "abcdefgh"}}]}
    scripted_llm.push(Reply.raw(body))
    assert await llm.complete_text("L1", [{"role": "user", "content": "abcd"}]) == "abcdefgh"
    assert llm.usage.snapshot() == {"L1": {"calls": 1, "prompt_tokens": 1, "completion_tokens": 2}}
