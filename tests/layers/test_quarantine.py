"""L1 never loses a turn: every failure the scripted endpoint can produce, in random sessions.

A stand-in model answers each extraction from the turns it is shown: one memory per good turn,
but when a bad turn is among them, the failure that turn carries (a truncated reply, prose,
invalid JSON, a wrong top-level key, ids never shown, only one-word memories, an empty reply),
for the first try and for the repair round alike. Transient HTTP errors strike in between
(mid-bisection), and the run is retried as the pipeline would retry its task. The invariant:
every turn at or below the cursor is covered by an accepted extraction (a memory cites it) or
quarantined (an open record with its raw replies), never both, never neither; a retried
quarantine that succeeds covers its turn. Calls stay within the documented bound.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import LLMError, StageOutputRejected
from stratamem.failures import Failures
from stratamem.layers.model import StageResult
from stratamem.layers.service import LayerService, Run
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLMCircuitOpen, LLMClient, LLMUnavailable
from stratamem.stages.bisect import attempts_to_first
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus
from stratamem.store.layers.port import LayerStore
from stratamem.testing import RecordedRequest, RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import reconcile_reply

from .conftest import llm_settings, settle_l1

SCOPE = Scope("acme")
SESSION = "s1"
_TURN = re.compile(r"^\[(T\d+)\] .*? \(user\): (.*)$", re.MULTILINE)
_MODE = re.compile(r"\bbad:(\w+)")


def bad_reply(mode: str, alias: str) -> Reply:
    """What a model that cannot read a turn answers, by kind of failure."""
    item = {"type": "persona", "content": "Maria likes green tea", "source_turn_ids": [alias]}
    replies = {
        "truncated": Reply.truncated('{"memories": [{"type": "persona", "content": "Maria l'),
        "prose": Reply.text('Sure! Maria said {"type": "persona"} and more [T1] things.'),
        "invalid_json": Reply.text('{"memories": [{"type": "persona", "content": }'),
        "wrong_key": Reply.json({"memory": [item]}),
        "unknown_ids": Reply.json({"memories": [{**item, "source_turn_ids": ["..."]}]}),
        "one_word": Reply.json({"memories": [{**item, "content": "Paris!"}]}),
        "empty": Reply.empty(),
        "missing_field": Reply.json({}),
    }
    return replies[mode]


MODES = ("truncated", "prose", "invalid_json", "wrong_key", "unknown_ids", "one_word", "empty",
         "missing_field")  # fmt: skip


@dataclass
class Model:
    """The stand-in model; `healed` makes it read every turn; `flaky` draws transient errors."""

    flaky: Callable[[], bool] = lambda: False
    healed: bool = False
    burst: int = 0
    shown: list[list[str]] = field(default_factory=list)

    def __call__(self, request: RecordedRequest) -> Reply:
        if self.burst:  # a 503 burst outlasts the client's own retries: the task fails
            self.burst -= 1
            return Reply.error(503, "model overloaded")
        if self.flaky():
            self.burst = 1
            return Reply.error(503, "model overloaded")
        text = str(request.messages[1]["content"]).split("NEW turns", 1)[-1]
        found = _TURN.findall(text)
        self.shown.append([alias for alias, _ in found])
        for alias, said in found:
            mode = _MODE.search(said)
            if mode and not self.healed:
                return bad_reply(mode[1], alias)
        return Reply.json({"memories": [
            {"type": "episodic", "content": f"Maria said: {said}", "source_turn_ids": [alias]}
            for alias, said in found
        ]})  # fmt: skip


@pytest.fixture
def layer_settings() -> LayerSettings:
    return LayerSettings(max_batch_turns=8, context_turns=2, l1_max_attempts=6)


@pytest.fixture
def memory(llm_memory: AsyncMemory, scripted_llm: ScriptedLLM) -> AsyncMemory:
    scripted_llm.on("L1-reconcile", reconcile_reply)
    return llm_memory


def layers_of(memory: AsyncMemory) -> LayerStore:
    assert memory.layers is not None
    return memory.layers


async def capture(memory: AsyncMemory, modes: list[str | None]) -> None:
    turns = [
        {"role": "user", "speaker": "Maria",
         "text": f"Turn {i} about the garden" + (f" bad:{m}" if m else "")}
        for i, m in enumerate(modes)
    ]  # fmt: skip
    await memory.capture("acme", SESSION, turns)


async def catch_up(
    service: LayerService, scripted_llm: ScriptedLLM, budget_calls: int
) -> list[StageResult]:
    """L1 until caught up (`settle_l1`), every run within its call bound."""
    calls = [len(scripted_llm.calls("L1"))]

    def bounded() -> None:
        calls.append(len(scripted_llm.calls("L1")))
        assert calls[-1] - calls[-2] <= budget_calls

    return await settle_l1(service, SESSION, per_run=bounded)


def assert_invariant(memory: AsyncMemory, bad: set[int]) -> None:
    """Every turn up to the cursor: cited by a memory, or quarantined (open), one of the two."""
    layers = layers_of(memory)
    cursor = layers.session_state(SCOPE, SESSION).cursor_seq
    quarantined = {
        t for f in layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.QUARANTINE))
        if f.status is FailureStatus.OPEN for t in f.turn_ids
    }  # fmt: skip
    cited = {t for m in memory.store.list_memories(SCOPE, limit=1000) for t in m.source_turn_ids}
    for index, turn in enumerate(memory.store.list_turns(SCOPE, SESSION)):
        if turn.seq > cursor:
            continue
        if index in bad:
            assert turn.id in quarantined and turn.id not in cited, turn.text
        else:
            assert turn.id in cited and turn.id not in quarantined, turn.text


@pytest.mark.parametrize("seed", range(16))
async def test_every_turn_is_covered_or_quarantined(
    memory: AsyncMemory, scripted_llm: ScriptedLLM, seed: int
) -> None:
    rng = random.Random(seed)
    count = rng.randint(5, 24)
    modes = [rng.choice(MODES) if rng.random() < 0.25 else None for _ in range(count)]
    bad = {i for i, m in enumerate(modes) if m}
    model = Model(flaky=lambda: rng.random() < 0.08)
    scripted_llm.on("L1", model)
    await capture(memory, modes)
    service = memory.layer_service()
    attempts = max(service.settings.l1_max_attempts, attempts_to_first(8))
    results = await catch_up(service, scripted_llm, budget_calls=2 * 4 * attempts)

    assert layers_of(memory).session_state(SCOPE, SESSION).pending_turns == 0
    assert_invariant(memory, bad)
    assert sum(r.counts["covered"] + r.counts["quarantined"] for r in results) == count
    assert sum(r.counts["quarantined"] for r in results) == len(bad)
    assert all(r.counts["attempts"] <= attempts for r in results)
    for record in layers_of(memory).list_failures(SCOPE, FailureQuery(limit=1000)):
        if record.kind is FailureKind.QUARANTINE:
            assert record.raws and record.error and record.stage == "L1"

    model.healed, model.flaky = True, lambda: False  # better now: each quarantine is retried
    failures = Failures(service)
    for record in layers_of(memory).list_failures(SCOPE, FailureQuery(kind=FailureKind.QUARANTINE)):
        outcome = await failures.retry("acme", record.id)
        assert outcome.failure.status is FailureStatus.RESOLVED
    assert_invariant(memory, bad=set())


async def test_one_bad_turn_costs_a_logarithmic_number_of_attempts(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    modes: list[str | None] = [None] * 8
    modes[5] = "truncated"
    model = Model()
    scripted_llm.on("L1", model)
    await capture(memory, modes)
    memory.layer_settings.l1_max_attempts = 1 + 2 * 3  # 1 + 2 ceil(log2 8)
    result = await memory.layer_service().run_l1(Run("acme", "task-1", SESSION))

    assert result.counts == {**result.counts, "turns": 8, "covered": 7, "quarantined": 1,
                             "rejected_batches": 3, "attempts": 7}  # fmt: skip
    assert [len(s) for s in model.shown] == [8, 4, 4, 2, 1, 1, 2]  # halves, first half first
    [quarantine] = layers_of(memory).list_failures(SCOPE, FailureQuery(kind=FailureKind.QUARANTINE))
    assert quarantine.detail == {"seq": 6} and "LLMReplyTruncated" in quarantine.error
    assert quarantine.raws == ('{"memories": [{"type": "persona", "content": "Maria l',)
    batches = layers_of(memory).list_failures(SCOPE, FailureQuery(kind=FailureKind.BATCH))
    assert sorted(len(b.turn_ids) for b in batches) == [2, 4, 8]
    assert {b.status for b in batches} == {FailureStatus.NOTED}
    assert_invariant(memory, {5})


async def test_a_run_out_of_attempts_commits_the_settled_prefix(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """Every turn fails: a run settles what its attempts reach, the next goes on from there."""
    scripted_llm.on("L1", Model())
    await capture(memory, ["empty"] * 8)
    service = memory.layer_service()
    first = await service.run_l1(Run("acme", "task-1", SESSION))
    assert first.counts["attempts"] == 6 and 0 < first.counts["quarantined"] < 8
    cursor = layers_of(memory).session_state(SCOPE, SESSION).cursor_seq
    assert cursor == first.counts["turns"] == first.counts["quarantined"]
    await catch_up(service, scripted_llm, budget_calls=4 * 6)
    assert_invariant(memory, set(range(8)))


async def test_a_run_cancelled_between_attempts_keeps_nothing(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """The worker dies in the middle of a bisection: nothing was committed, the re-run settles
    the batch in full."""
    modes: list[str | None] = [None, None, "wrong_key", None]
    model = Model()
    scripted_llm.push_for("L1", bad_reply("wrong_key", "T3"), bad_reply("wrong_key", "T3"),
                          Reply.held(Reply.json({"memories": []})))  # fmt: skip
    scripted_llm.on("L1", model)
    await capture(memory, modes)
    service = memory.layer_service()
    run = asyncio.ensure_future(service.run_l1(Run("acme", "task-1", SESSION)))
    assert await scripted_llm.until_held(1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    scripted_llm.release()
    layers = layers_of(memory)
    assert layers.session_state(SCOPE, SESSION).cursor_seq == 0
    assert layers.list_failures(SCOPE) == [] and memory.store.list_memories(SCOPE) == []

    await catch_up(service, scripted_llm, budget_calls=4 * 6)
    assert_invariant(memory, {2})


async def test_a_transport_failure_keeps_the_cursor_and_is_recorded(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    modes: list[str | None] = [None, "truncated", None]
    await capture(memory, modes)
    scripted_llm.push_for("L1", bad_reply("truncated", "T2"), Reply.error(500, "boom"),
                          Reply.error(502, "down"))  # fmt: skip
    scripted_llm.on("L1", Model())
    service = memory.layer_service()
    with pytest.raises(LLMError):
        await service.run_l1(Run("acme", "task-1", SESSION))
    layers = layers_of(memory)
    assert layers.session_state(SCOPE, SESSION).cursor_seq == 0
    [failure] = layers.list_failures(SCOPE)
    assert (failure.kind, failure.status, failure.stage) == (
        FailureKind.STAGE, FailureStatus.OPEN, "L1",
    )  # fmt: skip
    assert "down" in failure.raws[0] and memory.store.list_memories(SCOPE) == []

    result = await service.run_l1(Run("acme", "task-1", SESSION))  # the pipeline's retry
    assert result.counts["quarantined"] == 1 and result.counts["covered"] == 2
    assert layers.get_failure(SCOPE, failure.id).status is FailureStatus.RESOLVED
    assert_invariant(memory, {1})


async def test_what_settled_before_an_endpoint_failure_is_kept(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """The endpoint fails in the middle of a bisection: the turns settled before are committed
    (under a receipt of their own), the cursor stops before the turn the failure hit, the task
    fails; its retry goes on from there."""
    await capture(memory, [None, "one_word", None, None])
    turn_0 = {"type": "persona", "content": "Maria said turn 0", "source_turn_ids": ["T1"]}
    scripted_llm.push_for(
        "L1", *[bad_reply("one_word", "T2")] * 4,  # the batch, then T1-T2: split
        Reply.json({"memories": [turn_0]}), *[bad_reply("one_word", "T1")] * 2,  # T1, T2
        Reply.error(503, "down"), Reply.error(503, "down"),  # T3-T4: the endpoint fails
    )  # fmt: skip
    scripted_llm.on("L1", Model())
    service = memory.layer_service()
    with pytest.raises(LLMError):
        await service.run_l1(Run("acme", "task-1", SESSION))
    layers = layers_of(memory)
    assert layers.session_state(SCOPE, SESSION).cursor_seq == 2  # T1 covered, T2 quarantined
    evidence = service.evidence
    kept = evidence.receipt(SCOPE, "task-1@0")
    assert kept is not None and kept.result["counts"]["quarantined"] == 1
    assert evidence.receipt(SCOPE, "task-1") is None
    [failure] = layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.STAGE))
    assert failure.status is FailureStatus.OPEN and "down" in failure.raws[0]

    again = await service.run_l1(Run("acme", "task-1", SESSION))  # the pipeline's retry
    assert again.counts["turns"] == 2 and again.counts["covered"] == 2
    assert layers.get_failure(SCOPE, failure.id).status is FailureStatus.RESOLVED
    assert_invariant(memory, {1})


async def test_dropped_items_are_noted_and_the_rest_is_kept(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    await capture(memory, [None, None])
    scripted_llm.push_for("L1", Reply.json({"memories": [
        {"type": "persona", "content": "Maria tends a garden", "source_turn_ids": ["T1"]},
        {"type": "persona", "content": "Paris!", "source_turn_ids": ["T2"]},
        {"type": "persona", "content": "Maria grows beans", "source_turn_ids": ["B1"]},
        {"type": "hobby", "content": "Maria likes spades", "source_turn_ids": ["T2"]},
    ]}))  # fmt: skip
    result = await memory.layer_service().run_l1(Run("acme", "task-1", SESSION))

    assert result.counts["covered"] == 2 and result.counts["dropped_items"] == 3
    assert [m.content for m in memory.store.list_memories(SCOPE)] == ["Maria tends a garden"]
    notes = layers_of(memory).list_failures(SCOPE, FailureQuery(kind=FailureKind.ITEM))
    reasons = sorted(n.error for n in notes)
    assert len(reasons) == 3 and reasons[0].startswith("content 'Paris!' says too little")
    assert reasons[1].startswith("source_turn_ids ['B1'] were not shown")
    assert reasons[2].startswith("type: Input should be")
    assert len(scripted_llm.calls("L1")) == 1  # one valid item: the reply was used, no repair


async def test_a_retry_that_fails_again_keeps_the_quarantine_open(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    await capture(memory, ["prose"])
    scripted_llm.on("L1", Model())
    service = memory.layer_service()
    await service.run_l1(Run("acme", "task-1", SESSION))
    [record] = layers_of(memory).list_failures(SCOPE)
    assert len(record.raws) == 2  # the reply and the client's repair round

    with pytest.raises(StageOutputRejected):
        await Failures(service).retry("acme", record.id)
    again = layers_of(memory).get_failure(SCOPE, record.id)
    assert again.status is FailureStatus.OPEN and again.attempts == 2 and len(again.raws) == 4
    assert memory.store.list_memories(SCOPE) == []


async def test_a_dead_endpoint_opens_the_breaker_and_quarantines_nothing(
    tmp_path: Path, clock: ManualClock, scripted_llm: ScriptedLLM
) -> None:
    """The server dies in the middle of a bisection: after `breaker_failures` dropped
    connections the breaker opens; the task fails with `LLMCircuitOpen` (a `Postponed`: the
    pipeline waits without spending attempts), no turn is quarantined, only the transport
    failures that opened it are recorded (one record, seen twice); once the cool-down passes,
    the run settles all."""
    client = LLMClient(llm_settings(scripted_llm, breaker_failures=2, breaker_cooldown_s=30),
                       clock=clock, sleep=RecordingSleep())  # fmt: skip
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64", background_embedding=False)
    memory = AsyncMemory.open(settings, clock=clock, llm=client,
                              layer_settings=LayerSettings(max_batch_turns=8))  # fmt: skip
    try:
        await capture(memory, [None, "one_word", None, None])
        scripted_llm.push_for("L1", *[bad_reply("one_word", "T2")] * 2, Reply.dropped(),
                              Reply.dropped())  # fmt: skip
        scripted_llm.on("L1", Model())
        scripted_llm.on("L1-reconcile", reconcile_reply)
        service = memory.layer_service()
        for _ in range(2):  # the pipeline retries the task: the second drop opens the breaker
            with pytest.raises(LLMUnavailable):
                await service.run_l1(Run("acme", "task-1", SESSION))
        with pytest.raises(LLMCircuitOpen):  # the pipeline postpones it, spending no attempt
            await service.run_l1(Run("acme", "task-1", SESSION))
        layers = layers_of(memory)
        assert layers.session_state(SCOPE, SESSION).cursor_seq == 0
        [recorded] = layers.list_failures(SCOPE)  # one condition: the dropped connections
        assert (recorded.kind, recorded.attempts) == (FailureKind.STAGE, 2)
        assert "LLMUnavailable" in recorded.error
        calls = len(scripted_llm.calls("L1"))
        clock.advance(30)
        await service.run_l1(Run("acme", "task-1", SESSION))
        assert len(scripted_llm.calls("L1")) > calls
        assert_invariant(memory, {1})
    finally:
        await memory.aclose()
        await client.aclose()
