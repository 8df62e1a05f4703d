"""Quarantined turns are retried by themselves: the backlog scheduler submits an L1 task of the
turn's session with `{"retry": id}` when the record's `retry_at` comes (1 h, 6 h, 24 h after by
default), the worker runs it under the session's lock; after the last wait the record waits for
an operator. A real worker on the SQLite backend, a manual clock, the scripted LLM server."""

from __future__ import annotations

import pytest

from stratamem.layers.settings import LayerSettings
from stratamem.pipeline.task import TaskType
from stratamem.pipeline.worker import Outcome
from stratamem.store.failures.records import Failure, FailureKind, FailureQuery, FailureStatus
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply
from tests.layers import test_pipeline
from tests.layers.test_pipeline import SCOPE, TURNS, Rig

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
    assert all(t.type is TaskType.L1 and "retry" in t.payload for t in tasks)
    return [await rig.run_next(TaskType.L1) for _ in tasks]


async def test_a_quarantined_turn_is_retried_by_itself_with_long_backoff(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", garbage)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(TaskType.L1) is Outcome.COMPLETED
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
    assert [t.type for t in await rig.tick()] == [TaskType.L2]  # the new memories; no retry


@pytest.mark.parametrize("layer_settings", [LayerSettings(quarantine_retry_s=[60.0])])
async def test_after_the_last_automatic_retry_a_turn_waits_for_an_operator(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", garbage)
    await rig.memory.capture("acme", "s1", TURNS[:1])
    await rig.tick()
    await rig.run_next(TaskType.L1)
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
    await rig.run_next(TaskType.L1)
    scripted_llm.on("L1", lambda request: Reply.error(500, "overloaded"))
    rig.clock.advance(HOUR)
    assert await run_due_retries(rig) == [Outcome.POSTPONED]
    [record] = quarantined(rig)
    assert (record.status, record.auto_retries) == (FailureStatus.OPEN, 0)  # not counted
    scripted_llm.on("L1", l1_reply)
    rig.clock.advance(60)
    assert await rig.worker.pump_once() == 2  # the postponed task is due again (and an L2)
    ready = await rig.backend.consume("c", count=2, block_ms=0, now=rig.clock.now())
    [again] = [d for d in ready if d.task.type is TaskType.L1]
    assert again.task.attempt == 0 and await rig.worker.handle(again) is Outcome.COMPLETED
    assert quarantined(rig)[0].status is FailureStatus.RESOLVED
