"""Quarantined turns are retried by themselves: the backlog scheduler submits an L1 task of the
turn's session with `{"retry": id}` when the record's `retry_at` comes (1 h, 6 h, 24 h after by
default), the worker runs it under the session's lock; after the last wait the record waits for
an operator. A real worker on the SQLite backend, a manual clock, the scripted LLM server."""

from __future__ import annotations

import pytest

from stratamem.layers.executors import LayerExecutors
from stratamem.layers.service import LayerService
from stratamem.layers.settings import LayerSettings
from stratamem.layers.task_types import L1, L2
from stratamem.llm import LLMClient
from stratamem.llm.errors import names_endpoint_trouble
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from stratamem.pipeline.worker import Outcome, Worker
from stratamem.store.failures.records import Failure, FailureKind, FailureQuery, FailureStatus
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply
from tests.layers import test_pipeline
from tests.layers.conftest import llm_settings
from tests.layers.test_pipeline import SCOPE, TURNS, Rig, _no_sleep

rig = test_pipeline.rig  # the fixture: a worker and a scheduler beside an LLM memory
HOUR = 3600.0


def garbage(request: object) -> Reply:
    return Reply.text("Sorry, I can't help with that.")


def quarantined(rig: Rig) -> list[Failure]:
    assert rig.memory.layers is not None
    query = FailureQuery(kind=FailureKind.QUARANTINE)
    return sorted(rig.memory.layers.list_failures(SCOPE, query), key=lambda f: f.id)


async def run_due_retries(rig: Rig) -> list[Outcome]:
    tasks = await rig.tick()
    assert all(t.type is L1 and "retry" in t.payload for t in tasks)
    return [await rig.run_next(L1) for _ in tasks]


async def test_a_quarantined_turn_is_retried_by_itself_with_long_backoff(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", garbage)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(L1) is Outcome.COMPLETED
    start = rig.clock.now()
    assert [f.retry_at for f in quarantined(rig)] == [start + HOUR] * 2

    rig.clock.advance(HOUR - 1)
    assert await rig.tick() == []  # not due yet
    rig.clock.advance(1)
    assert await run_due_retries(rig) == [Outcome.COMPLETED] * 2  # still unusable: counted
    assert [(f.status, f.auto_retries, f.retry_at) for f in quarantined(rig)] == [
        (FailureStatus.OPEN, 1, rig.clock.now() + 6 * HOUR)
    ] * 2
    assert await rig.tick() == []

    scripted_llm.on("L1", l1_reply)  # the model reads them now
    rig.clock.advance(6 * HOUR)
    assert await run_due_retries(rig) == [Outcome.COMPLETED] * 2
    resolved = [(f.status, f.retry_at) for f in quarantined(rig)]
    assert resolved == [(FailureStatus.RESOLVED, None)] * 2
    assert rig.memory.store.list_memories(SCOPE)  # the turns are covered
    rig.clock.advance(24 * HOUR)
    assert [t.type for t in await rig.tick()] == [L2]  # the new memories; no retry


@pytest.mark.parametrize("layer_settings", [LayerSettings(quarantine_retry_s=[60.0])])
async def test_after_the_last_automatic_retry_a_turn_waits_for_an_operator(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", garbage)
    await rig.memory.capture("acme", "s1", TURNS[:1])
    await rig.tick()
    await rig.run_next(L1)
    rig.clock.advance(60)
    assert await run_due_retries(rig) == [Outcome.COMPLETED]
    [record] = quarantined(rig)
    assert (record.status, record.auto_retries, record.retry_at) == (FailureStatus.OPEN, 1, None)
    assert len(record.raws) > 1 and record.attempts == 2  # the retry's replies kept
    rig.clock.advance(30 * 24 * HOUR)
    assert await rig.tick() == []


async def test_an_automatic_retry_waits_out_endpoint_trouble_without_counting(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", garbage)
    await rig.memory.capture("acme", "s1", TURNS[:1])
    await rig.tick()
    await rig.run_next(L1)
    scripted_llm.on("L1", lambda request: Reply.error(500, "overloaded"))
    rig.clock.advance(HOUR)
    assert await run_due_retries(rig) == [Outcome.POSTPONED]
    [record] = quarantined(rig)
    assert (record.status, record.auto_retries) == (FailureStatus.OPEN, 0)  # not counted
    scripted_llm.on("L1", l1_reply)
    rig.clock.advance(60)
    assert await rig.worker.pump_once() == 2  # the postponed task is due again (and an L2)
    ready = await rig.backend.consume("c", count=2, block_ms=0, now=rig.clock.now())
    [again] = [d for d in ready if d.task.type is L1]
    assert again.task.attempt == 0 and await rig.worker.handle(again) is Outcome.COMPLETED
    assert quarantined(rig)[0].status is FailureStatus.RESOLVED


async def test_a_task_dead_lettered_by_endpoint_trouble_is_requeued_once_it_answers(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.push_for("L1", Reply.rate_limited(3600))  # longer than the client waits
    llm = LLMClient(llm_settings(scripted_llm, max_attempts=1), clock=rig.clock)
    assert rig.memory.layers is not None
    service = LayerService(rig.memory.store, rig.memory.layers, rig.memory.evidence, llm=llm)
    registry = ExecutorRegistry()
    LayerExecutors(service, rig.memory.backlog, rig.backend).registry(registry)
    worker = Worker(rig.backend, registry, PipelineSettings(retry_limit=0), clock=rig.clock,
                    name="w2", sleep=_no_sleep)  # fmt: skip
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    assert await worker.handle(await rig.next(L1)) is Outcome.DEAD
    assert await worker.heal_once() == 0  # the endpoint has not answered since

    rig.clock.advance(60)
    await rig.memory.capture("acme", "s2", TURNS)  # another session's L1: the endpoint answers
    await rig.backend.enqueue(Task(L1, "acme", "s2"), now=rig.clock.now())
    assert await worker.handle(await rig.next(L1)) is Outcome.COMPLETED
    assert await worker.heal_once() == 1 and await rig.backend.list_dead(limit=10) == []
    assert await worker.handle(await rig.next(L1)) is Outcome.COMPLETED
    assert rig.memory.layers.session_state(SCOPE, "s1").cursor_seq == 2
    assert await worker.heal_once() == 0
    await llm.aclose()


@pytest.mark.parametrize(
    ("error", "trouble"),
    [
        ("LLMServerError: stage L1: http://h:1 answered HTTP 500: overloaded", True),
        ("LLMTimeout: stage L1: no answer from http://h:1/chat/completions within 60 s", True),
        ("LLMRateLimited: stage L1: http://h:1 answered HTTP 429: slow down", True),
        ("LLMHTTPError: stage L1: http://h:1 answered HTTP 502: bad gateway", True),  # old
        ("LLMHTTPError: stage L1: http://h:1 answered HTTP 400: bad request", False),
        ("StageOutputRejected: stage L2 of task t: no valid SceneOps", False),
        ("LayerConflict: the cursor moved", False),
    ],
)
def test_which_dead_letters_are_endpoint_trouble(error: str, trouble: bool) -> None:
    assert names_endpoint_trouble(error) is trouble
