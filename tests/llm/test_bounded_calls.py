"""Every call is bounded: `max_tokens` on every request, and a circuit breaker per endpoint
(time injected: the cool-down passes when the manual clock moves)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from stratamem.clock import ManualClock
from stratamem.errors import Postponed
from stratamem.llm import (
    LLMCircuitOpen,
    LLMClient,
    LLMHTTPError,
    LLMOutputInvalid,
    LLMServerError,
    LLMSettings,
    LLMUnavailable,
    StageSettings,
)
from stratamem.llm.breaker import BreakerState
from stratamem.llm.settings import DEFAULT_MAX_TOKENS, STAGE_MAX_TOKENS
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM

MESSAGES = [{"role": "user", "content": "hi"}]


class _Answer(BaseModel):
    """Any schema (the call never gets as far as reading one)."""

    answer: str


def settings(server: ScriptedLLM, **options: object) -> LLMSettings:
    values = {"base_url": server.base_url, "model": "m", "timeout_s": 10.0, **options}
    return LLMSettings.model_validate(values)


async def test_every_request_carries_max_tokens_from_the_stage_setting(
    scripted_llm: ScriptedLLM,
) -> None:
    scripted_llm.handler = lambda request: Reply.text("ok")
    stages = {"L2": StageSettings(max_tokens=300)}
    async with LLMClient(settings(scripted_llm, stages=stages)) as client:
        for stage in ("L1", "L2", "offload-l15", "some-other-stage"):
            await client.complete_text(stage, MESSAGES)
        await client.complete_text("L1", MESSAGES, max_tokens=77)  # the call's own bound wins
    sent = [(r.stage, r.body["max_tokens"]) for r in scripted_llm.calls()]
    assert sent == [
        ("L1", STAGE_MAX_TOKENS["l1"]),
        ("L2", 300),
        ("offload-l15", STAGE_MAX_TOKENS["offload_l15"]),
        ("some-other-stage", DEFAULT_MAX_TOKENS),
        ("L1", 77),
    ]


def test_max_tokens_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "m")
    monkeypatch.setenv("STRATAMEM_LLM_MAX_TOKENS", "512")
    monkeypatch.setenv("STRATAMEM_LLM_OFFLOAD_L2_MAX_TOKENS", "900")
    loaded = LLMSettings()
    assert loaded.for_stage("L1").max_tokens == 512
    assert loaded.for_stage("offload-l2").max_tokens == 900


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def test_the_breaker_opens_after_consecutive_transport_failures(
    scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    scripted_llm.push(*[Reply.dropped()] * 3)
    options = {"breaker_failures": 3, "breaker_cooldown_s": 30.0}
    async with LLMClient(settings(scripted_llm, **options), clock=clock) as client:
        for _ in range(3):
            with pytest.raises(LLMUnavailable):
                await client.complete_text("L1", MESSAGES)
        with pytest.raises(LLMCircuitOpen) as caught:
            await client.complete_json("L1", MESSAGES, _Answer)
        assert client.breaker.state(scripted_llm.base_url) is BreakerState.OPEN
    assert len(scripted_llm.calls()) == 3  # the fourth call sent nothing
    assert isinstance(caught.value, Postponed) and caught.value.retry_after_s == 30.0
    assert not isinstance(caught.value, LLMOutputInvalid)  # never the turns' fault


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_a_5xx_storm_opens_the_breaker_and_postpones(
    scripted_llm: ScriptedLLM, clock: ManualClock, status: int
) -> None:
    scripted_llm.push(*[Reply.error(status, "overloaded")] * 2)
    options = {"breaker_failures": 2, "breaker_cooldown_s": 30.0, "max_attempts": 1}
    async with LLMClient(settings(scripted_llm, **options), clock=clock) as client:
        for _ in range(2):
            with pytest.raises(LLMServerError) as caught:
                await client.complete_text("L1", MESSAGES)
            assert caught.value.status == status and "overloaded" in caught.value.body
            assert isinstance(caught.value, Postponed) and caught.value.retry_after_s == 30.0
            assert not isinstance(caught.value, LLMOutputInvalid)
        assert client.breaker.state(scripted_llm.base_url) is BreakerState.OPEN
        with pytest.raises(LLMCircuitOpen):
            await client.complete_text("L1", MESSAGES)
    assert len(scripted_llm.calls()) == 2


async def test_a_501_is_no_endpoint_trouble(scripted_llm: ScriptedLLM, clock: ManualClock) -> None:
    scripted_llm.push(Reply.error(501, "not implemented"))
    async with LLMClient(settings(scripted_llm, breaker_failures=1), clock=clock) as client:
        with pytest.raises(LLMHTTPError) as caught:
            await client.complete_text("L1", MESSAGES)
        assert not isinstance(caught.value, Postponed)  # the request's fault: retried, then dead
        assert client.breaker.state(scripted_llm.base_url) is BreakerState.CLOSED


async def test_an_answer_resets_the_count(scripted_llm: ScriptedLLM, clock: ManualClock) -> None:
    scripted_llm.push(Reply.dropped(), Reply.error(400, "bad request"), Reply.dropped())
    async with LLMClient(settings(scripted_llm, breaker_failures=2), clock=clock) as client:
        with pytest.raises(LLMUnavailable):
            await client.complete_text("L1", MESSAGES)
        with pytest.raises(LLMHTTPError):  # the server answered: it is up
            await client.complete_text("L1", MESSAGES)
        with pytest.raises(LLMUnavailable):
            await client.complete_text("L1", MESSAGES)
        assert client.breaker.state(scripted_llm.base_url) is BreakerState.CLOSED


async def test_half_open_lets_one_probe_through(
    scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    scripted_llm.push(Reply.dropped(), Reply.dropped(), Reply.text("back"))
    options = {"breaker_failures": 1, "breaker_cooldown_s": 30.0}
    async with LLMClient(settings(scripted_llm, **options), clock=clock) as client:
        endpoint = scripted_llm.base_url
        with pytest.raises(LLMUnavailable):
            await client.complete_text("L1", MESSAGES)
        clock.advance(29.0)
        with pytest.raises(LLMCircuitOpen) as early:
            await client.complete_text("L1", MESSAGES)
        assert early.value.retry_after_s == pytest.approx(1.0)
        clock.advance(1.0)
        assert client.breaker.state(endpoint) is BreakerState.HALF_OPEN
        with pytest.raises(LLMUnavailable):  # the probe fails: open for another cool-down
            await client.complete_text("L1", MESSAGES)
        assert client.breaker.state(endpoint) is BreakerState.OPEN
        clock.advance(30.0)
        assert await client.complete_text("L1", MESSAGES) == "back"
        assert client.breaker.state(endpoint) is BreakerState.CLOSED
    assert len(scripted_llm.calls()) == 3


async def test_a_cancelled_probe_leaves_the_breaker_half_open(
    scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    scripted_llm.push(Reply.dropped(), Reply.held(Reply.text("late")), Reply.text("ok"))
    options = {"breaker_failures": 1, "breaker_cooldown_s": 30.0}
    async with LLMClient(settings(scripted_llm, **options), clock=clock) as client:
        with pytest.raises(LLMUnavailable):
            await client.complete_text("L1", MESSAGES)
        clock.advance(30.0)
        probe = asyncio.create_task(client.complete_text("L1", MESSAGES))
        assert await scripted_llm.until_held()
        with pytest.raises(LLMCircuitOpen):  # one probe at a time
            await client.complete_text("L1", MESSAGES)
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
        assert await client.complete_text("L1", MESSAGES) == "ok"


async def test_each_endpoint_has_its_own_breaker(clock: ManualClock) -> None:
    sleep = RecordingSleep()
    with ScriptedLLM() as down, ScriptedLLM() as up:
        down.push(Reply.dropped())
        up.push(Reply.text("fine"))
        stages = {"L2": StageSettings(base_url=up.base_url)}
        options = {"breaker_failures": 1, "stages": stages}
        async with LLMClient(settings(down, **options), clock=clock, sleep=sleep) as client:
            with pytest.raises(LLMUnavailable):
                await client.complete_text("L1", MESSAGES)
            with pytest.raises(LLMCircuitOpen):
                await client.complete_text("L1", MESSAGES)
            assert await client.complete_text("L2", MESSAGES) == "fine"
