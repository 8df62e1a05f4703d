"""The layers as pipeline executors: a real worker on the SQLite backend, a manual clock, the
scripted LLM server. Capture → scheduler → L1 → (L2 timer) → L2 → L3 → recall; failures retry
and end in a dead letter with the raw reply; a stale fence aborts without writing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import ReceiptConflict
from stratamem.layers.backlog import layer_sources
from stratamem.layers.executors import LayerExecutors
from stratamem.layers.service import LayerService
from stratamem.layers.settings import LayerSettings
from stratamem.layers.task_types import FLUSH, L1, L2, L2_TIMER, L3
from stratamem.llm import LLMClient
from stratamem.llm.breaker import BreakerState
from stratamem.pipeline.executors import ExecResult, ExecutionContext, Executor, ExecutorRegistry
from stratamem.pipeline.reconcile import Report, reconcile
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import LockScope, PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.status import WORKERS_SCOPE
from stratamem.pipeline.task import Delivery, Task
from stratamem.pipeline.task_type import TaskType
from stratamem.pipeline.timers import lock_key_for
from stratamem.pipeline.worker import Outcome, Worker
from stratamem.store.core.port import Fence
from stratamem.store.evidence.executions import Execution
from stratamem.store.evidence.receipts import Attempt, Receipt, ReceiptDraft
from stratamem.store.failures.records import FailureKind, FailureQuery
from stratamem.store.sqlite import SqliteStore
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply

from .conftest import llm_settings

SCOPE = Scope("acme")
LOCK_KEY = lock_key_for(Task(L1, "acme", "s1"), LockScope.SESSION)
TURNS = [
    {"role": "user", "speaker": "Maria", "text": "I'm a nurse and I live in Lisbon."},
    {"role": "user", "speaker": "Maria", "text": "I ran a half marathon yesterday."},
]


@dataclass
class Rig:
    memory: AsyncMemory
    backend: SqliteBackend
    worker: Worker
    scheduler: BacklogScheduler
    clock: ManualClock

    async def tick(self) -> list[Task]:
        """One backlog scheduler pass over the layers' sources; the tasks it submitted."""
        return (await self.scheduler.run_pass(self.clock.now())).submitted

    async def next(self, task_type: TaskType) -> Delivery:
        """The next ready delivery, which must be of `task_type`."""
        [delivery] = await self.backend.consume("c", count=1, block_ms=0, now=self.clock.now())
        assert delivery.task.type is task_type
        return delivery

    async def run_next(self, task_type: TaskType) -> Outcome:
        return await self.worker.handle(await self.next(task_type))


async def _no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


#: The pipeline's mechanics, not the worth of a run: L2 and L3 run on any change here
#: (`scheduling.l2_worth_running`, `l3_worth_running` have their own tests).
EVERY_CHANGE = {"l2_min_novel": 1, "l2_min_changed": 1, "l3_min_memories": 1}


@pytest.fixture
def layer_settings() -> LayerSettings:
    return LayerSettings(max_batch_turns=10, context_turns=2, **EVERY_CHANGE)


@pytest.fixture
async def rig(
    llm_memory: AsyncMemory, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[Rig]:
    backend = SqliteBackend(tmp_path / "pipeline.db")
    settings = PipelineSettings(retry_limit=1, l2_delay_s=60)
    registry = ExecutorRegistry()
    llm_memory.layer_executors(backend).registry(registry)
    worker = Worker(backend, registry, settings, clock=clock, name="w", sleep=_no_sleep)
    service = llm_memory.layer_service()
    backlog = PipelineSettings(scheduler_limit=100, scheduler_grace_s=600,
                               scheduler_in_flight_s=600)  # fmt: skip
    sources = layer_sources(llm_memory.backlog, service.settings, backlog.scheduler_grace_s)
    scheduler = BacklogScheduler(backend, sources, backlog)
    yield Rig(llm_memory, backend, worker, scheduler, clock)
    await backend.close()


async def test_capture_to_recall_through_the_worker(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    [l1] = await rig.tick()
    assert l1.type is L1 and await rig.tick() == []  # requested once

    assert await rig.run_next(L1) is Outcome.COMPLETED
    due_at, _ = await rig.backend.get_timer(L2_TIMER.key("acme", "s1")) or (None, None)
    assert due_at == rig.clock.now() + 60
    rig.clock.advance(60)
    assert await rig.worker.pump_once() == 1
    assert await rig.run_next(L2) is Outcome.COMPLETED
    assert await rig.run_next(L3) is Outcome.COMPLETED  # the L2 changed scenes

    recall = await rig.memory.recall("acme", "marathon", include_turns=False)
    assert "half marathon" in recall.context
    assert "- Life: What the user shares." in recall.stable
    assert "The user talks about: Life." in recall.stable


@pytest.mark.parametrize("layer_settings", [LayerSettings(max_batch_turns=10, context_turns=2)])
async def test_an_l2_with_too_little_new_waits_for_the_quiet(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """Two new memories are fewer than `l2_min_novel`: the timer's L2 makes no call; once the
    tenant is quiet the backlog's L2 consolidates them, and L3 writes the first profile."""
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(L1) is Outcome.COMPLETED
    rig.clock.advance(60)
    assert await rig.worker.pump_once() == 1
    assert await rig.run_next(L2) is Outcome.SKIPPED
    assert scripted_llm.calls("L2") == []
    assert [t for t in await rig.tick() if t.type is L2] == []  # not quiet yet

    rig.clock.advance(600)  # the rig's grace (600 s) and the quiet (300 s) have passed
    [l2] = [t for t in await rig.tick() if t.type is L2]
    assert l2.payload == {"reason": "backlog"}
    assert await rig.run_next(L2) is Outcome.COMPLETED
    assert await rig.run_next(L3) is Outcome.COMPLETED  # no profile yet
    assert len(scripted_llm.calls("L2")) == len(scripted_llm.calls("L3")) == 1


async def test_an_early_l2_rearms_its_timer(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    await rig.run_next(L1)
    await rig.backend.enqueue(Task(L2, "acme", "s1"), now=rig.clock.now())

    assert await rig.run_next(L2) is Outcome.SKIPPED
    due_at, _ = await rig.backend.get_timer(L2_TIMER.key("acme", "s1")) or (None, None)
    assert due_at == rig.clock.now() + rig.memory.layer_settings.l2_delay_s
    assert "L2" not in scripted_llm.usage()


async def test_an_unreadable_batch_is_quarantined_and_never_blocks_the_session(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.on("L1", lambda request: Reply.text("Sorry, I can't help with that."))
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()

    assert await rig.run_next(L1) is Outcome.COMPLETED
    assert await rig.backend.list_dead(limit=10) == []
    assert rig.memory.layers is not None
    assert rig.memory.layers.session_state(SCOPE, "s1").cursor_seq == 2
    quarantined = rig.memory.layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.QUARANTINE))
    assert len(quarantined) == 2
    assert all(f.raws == ("Sorry, I can't help with that.",) * 2 for f in quarantined)
    assert len(scripted_llm.calls("L1")) == 6  # the batch, then each turn: with repair rounds

    install_layer_handlers(scripted_llm)  # the session goes on with its next turns
    await rig.memory.capture("acme", "s1", [{"role": "user", "text": "I moved to Porto."}])
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    assert await rig.run_next(L1) is Outcome.COMPLETED
    assert [m.content for m in rig.memory.store.list_memories(SCOPE)] == ["user: I moved to Porto."]


async def test_an_l1_out_of_attempts_queues_the_rest_of_its_batch(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """Every turn unreadable, a budget that settles only part of the batch: the rest is queued
    at once, not left until the scheduler's request goes stale."""
    scripted_llm.on("L1", lambda request: Reply.truncated('{"memories": ['))
    rig.memory.layer_settings.l1_max_attempts = 1
    texts = [f"I planted row {i} of beans." for i in range(6)]
    await rig.memory.capture("acme", "s1", [{"role": "user", "text": t} for t in texts])
    await rig.tick()
    for _ in range(6):
        assert await rig.run_next(L1) is Outcome.COMPLETED
        assert rig.memory.layers is not None
        if rig.memory.layers.session_state(SCOPE, "s1").pending_turns == 0:
            break
    else:
        pytest.fail("the batch was not carried on")
    assert await rig.tick() == []  # nothing left to request
    quarantined = rig.memory.layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.QUARANTINE))
    assert len(quarantined) == 6


async def test_a_lock_taken_over_during_the_call_aborts_then_redelivery_writes_once(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    store = rig.memory.store
    assert isinstance(store, SqliteStore)
    taken, loop = [], asyncio.get_running_loop()

    def take_over_once(request: RecordedRequest) -> Reply:
        if not taken:  # another worker got the session's lock with a newer token
            taken.append(True)
            granted = rig.backend.raise_fence(LOCK_KEY, 10**6)  # the backend granted it
            asyncio.run_coroutine_threadsafe(granted, loop).result()
            with store.writing(Fence(LOCK_KEY, 10**6)):
                pass
        return l1_reply(request)

    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", take_over_once)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    delivery = await rig.next(L1)
    assert await rig.worker.handle(delivery) is Outcome.ABORTED
    assert store.list_memories(SCOPE) == []

    with store.writing(Fence(LOCK_KEY, 2 * 10**6)):
        pass  # the fence table moves on; our next grant must be newer still
    executors = rig.memory.layer_executors()
    # the task is delivered again (its delivery was never acknowledged) under a newer grant
    ctx = ExecutionContext(delivery.task, LOCK_KEY, 3 * 10**6, rig.clock, 0.0)
    assert (await executors.l1(ctx)).changed
    again = await executors.l1(ctx)  # delivered once more after a crash before the ack
    assert again.changed  # replayed from the receipt, so the cascade still runs
    assert len(store.list_memories(SCOPE)) == 2


async def test_flush_task_catches_up_then_cascades_to_l2_and_l3(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    rig.memory.layer_settings.max_batch_turns = 1  # two L1 batches inside one flush
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(FLUSH, "acme", "s1"), now=rig.clock.now())

    assert await rig.run_next(FLUSH) is Outcome.COMPLETED
    assert len(scripted_llm.calls("L1")) == 2
    assert await rig.run_next(L2) is Outcome.COMPLETED  # forced: no delay
    assert await rig.run_next(L3) is Outcome.COMPLETED
    assert rig.memory.layers is not None and rig.memory.layers.profile(SCOPE) is not None
    assert await rig.worker.pump_once() == 1  # the cascade's L2 timer, due at once …
    assert await rig.run_next(L2) is Outcome.SKIPPED  # … finds it too soon, re-arms
    assert len(scripted_llm.calls("L2")) == 1


async def test_l3_is_enqueued_every_k_memories(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    install_layer_handlers(scripted_llm)
    rig.memory.layer_settings.l3_every_memories = 2
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())

    assert await rig.run_next(L1) is Outcome.COMPLETED
    l3 = await rig.next(L3)
    assert l3.task.payload == {"reason": "memories", "session": "s1"}


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply.error(500, "model overloaded"), "LLMServerError"),
        (Reply.error(503, "model warming up"), "LLMServerError"),
        (Reply.held(Reply.json({"memories": []})), "LLMTimeout"),
        (Reply.dropped(), "LLMUnavailable"),
    ],
    ids=["http-500", "http-503", "timeout", "refused"],
)
async def test_endpoint_trouble_postpones_without_spending_an_attempt(
    rig: Rig, scripted_llm: ScriptedLLM, reply: Reply, error: str
) -> None:
    scripted_llm.push_for("L1", reply)
    scripted_llm.on("L1", l1_reply)
    options = {"timeout_s": 0.3, "max_attempts": 1, "breaker_failures": 1}
    short = LLMClient(llm_settings(scripted_llm, **options), clock=rig.clock)
    assert rig.memory.layers is not None
    service = LayerService(rig.memory.store, rig.memory.layers, rig.memory.evidence, llm=short)
    registry = ExecutorRegistry()
    LayerExecutors(service, rig.memory.backlog, rig.backend).registry(registry)
    worker = Worker(rig.backend, registry, PipelineSettings(retry_limit=0), clock=rig.clock,
                    name="w2", sleep=_no_sleep)  # fmt: skip
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())

    assert await worker.handle(await rig.next(L1)) is Outcome.POSTPONED
    assert await rig.backend.list_dead(limit=10) == []  # not the task's fault: no dead letter
    assert short.breaker.state(scripted_llm.base_url) is BreakerState.OPEN
    assert worker.metrics.failed == 0 and worker.metrics.postponed == 1
    [failure] = rig.memory.layers.list_failures(SCOPE)
    assert failure.stage == "L1" and failure.error.startswith(error)
    assert failure.kind is FailureKind.STAGE  # not a quarantine: the turns are not at fault
    if error == "LLMServerError":
        assert "model" in failure.raws[0]
    assert rig.memory.layers.session_state(SCOPE, "s1").cursor_seq == 0

    rig.clock.advance(30)  # the breaker's cool-down: the task is due again, same attempt
    assert await worker.pump_once() == 1
    again = await rig.next(L1)
    assert again.task.attempt == 0
    assert await worker.handle(again) is Outcome.COMPLETED
    assert rig.memory.layers.session_state(SCOPE, "s1").cursor_seq == 2
    [resolved] = rig.memory.layers.list_failures(SCOPE)
    assert resolved.status.value == "resolved"
    await short.aclose()


async def test_a_backlog_longer_than_a_batch_is_requested_again(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    rig.memory.layer_settings.max_batch_turns = 2
    turns = [{"role": "user", "speaker": "Maria", "text": f"I visited city number {i}."}
             for i in range(5)]  # fmt: skip
    await rig.memory.capture("acme", "s1", turns)
    for cursor, wait_s in ((2, 0.0), (4, 0.0), (5, 300.0)):
        rig.clock.advance(wait_s)  # the last turn waits for the idle timeout (warm-up: 4 turns)
        assert len(await rig.tick()) == 1
        assert await rig.tick() == []  # in flight, nothing new
        assert await rig.run_next(L1) is Outcome.COMPLETED
        assert rig.memory.layers is not None
        assert rig.memory.layers.session_state(SCOPE, "s1").cursor_seq == cursor
    assert await rig.tick() == []


async def test_a_request_left_unprocessed_is_made_again_after_a_backoff(rig: Rig) -> None:
    await rig.memory.capture("acme", "s1", TURNS)
    assert len(await rig.tick()) == 1
    rig.clock.advance(599)
    assert await rig.tick() == []  # still in flight
    rig.clock.advance(1)
    assert await rig.tick() == []  # no progress in 10 minutes: backing off 30 s
    rig.clock.advance(30)
    assert len(await rig.tick()) == 1  # e.g. the queue was lost: asked for again


async def test_the_worker_publishes_llm_usage_per_stage(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(L1) is Outcome.COMPLETED
    await rig.worker.publish_status()
    status = json.loads((await rig.backend.state_get(WORKERS_SCOPE))["w"])
    served = scripted_llm.usage()
    assert status["llm_usage"]["L1"] == served["L1"]
    assert status["llm_usage"]["L1"]["calls"] >= 1


async def test_lost_pipeline_state_is_found_again_in_the_store(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """Redis keeps nothing on disk: after a restart the queue and the timers are gone, but the
    store still says an L2 is owed: the backlog scheduler submits it after the grace period."""
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(L1) is Outcome.COMPLETED
    assert await rig.backend.remove_timer(L2_TIMER.key("acme", "s1"))  # "lost"
    assert await rig.tick() == []  # within the grace period: left to the timer
    rig.clock.advance(600)

    [l2] = await rig.tick()
    assert (l2.type, l2.tenant, l2.session) == (L2, "acme", None)  # per tenant
    assert await rig.tick() == []  # in flight: once
    assert await rig.run_next(L2) is Outcome.COMPLETED
    assert rig.memory.backlog is not None
    assert rig.memory.backlog.tenants_owing_l2(None, 10) == []


@pytest.mark.parametrize("layer_settings", [LayerSettings(l3_every_memories=1, **EVERY_CHANGE)])
async def test_an_owed_l3_is_submitted_again_when_lost(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(L1) is Outcome.COMPLETED
    await rig.next(L3)  # queued by count ... and lost before it ran
    assert rig.memory.backlog is not None
    assert [t.tenant for t in rig.memory.backlog.tenants_owing_l3(None, 1, 10)] == ["acme"]
    [l3] = [t for t in await rig.tick() if t.type is L3]
    assert l3.tenant == "acme"
    assert [t for t in await rig.tick() if t.type is L3] == []  # in flight
    rig.clock.advance(600 + 30)  # no progress: after the backoff, once more
    assert [t.type for t in await rig.tick()].count(L3) == 1


async def test_every_layer_task_writes_an_authentic_receipt_bound_to_its_attempt(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    evidence = rig.memory.evidence
    assert evidence is not None
    ran: list[tuple[Delivery, int]] = []  # each delivery, and its lock's fencing token

    async def run(task_type: TaskType) -> None:
        delivery = await rig.next(task_type)
        assert await rig.worker.handle(delivery) is Outcome.COMPLETED
        key = lock_key_for(delivery.task, LockScope.SESSION)
        assert key is not None
        ran.append((delivery, await rig.backend.fence_token(key)))

    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(FLUSH, "acme", "s1"), now=rig.clock.now())
    for task_type in (FLUSH, L2, L3):
        await run(task_type)
    await rig.memory.capture("acme", "s1", [{"role": "user", "text": "I moved to Porto."}])
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    await run(L1)
    for delivery, token in ran:
        task = delivery.task
        receipt = evidence.receipt(SCOPE, task.id)
        assert receipt is not None and receipt.authentic, task.type
        assert receipt.kind == task.type.name and receipt.outcome == "completed"
        attempt = receipt.attempt
        assert attempt is not None and attempt.worker == "w" and attempt.task_id == task.id
        assert (attempt.attempt, attempt.delivery, attempt.token) == (
            task.attempt, delivery.deliveries, token,
        )  # fmt: skip
    flush_batch = evidence.receipt(SCOPE, f"{ran[0][0].task.id}.0")
    assert flush_batch is not None and flush_batch.authentic  # each batch its own receipt


async def test_a_receipt_that_does_not_verify_is_a_conflict_never_a_replay(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    store, evidence = rig.memory.store, rig.memory.evidence
    assert isinstance(store, SqliteStore) and evidence is not None
    await rig.memory.capture("acme", "s1", TURNS)
    executors = rig.memory.layer_executors()
    ctx = ExecutionContext(Task(L1, "acme", "s1"), LOCK_KEY, 1, rig.clock, 0.0)
    assert (await executors.l1(ctx)).changed
    with store.writing() as conn:  # a receipt edited by hand: its result claims nothing ran
        conn.execute("UPDATE layer_receipts SET result = '{}' WHERE task_id = ?", (ctx.task.id,))
    receipt = evidence.receipt(SCOPE, ctx.task.id)
    assert receipt is not None and not receipt.authentic
    with pytest.raises(ReceiptConflict):
        await executors.l1(ctx)


async def test_rotated_receipt_keys_verify_until_retired(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    evidence = rig.memory.evidence
    assert evidence is not None
    now = rig.clock.now()
    evidence.record_receipt(SCOPE, ReceiptDraft("before", "flush", now, {"n": 1}), None)
    first = evidence.rotate_receipt_key(now)
    evidence.record_receipt(SCOPE, ReceiptDraft("after", "flush", now, {"n": 2}), None)
    assert [authentic(evidence.receipt(SCOPE, t)) for t in ("before", "after")] == [True, True]
    second = evidence.rotate_receipt_key(now + 1, retire_old=True)
    assert second != first
    assert [authentic(evidence.receipt(SCOPE, t)) for t in ("before", "after")] == [False, False]
    evidence.record_receipt(SCOPE, ReceiptDraft("newest", "flush", now, {"n": 3}), None)
    newest = evidence.receipt(SCOPE, "newest")
    assert newest is not None and newest.authentic


def authentic(receipt: Receipt | None) -> bool:
    assert receipt is not None
    return receipt.authentic


def _killed_after_commit(rig: Rig, task_type: TaskType) -> Executor:
    """Make `task_type` run for real, then die before its acknowledgement (its effects and its
    receipt are committed, the delivery stays pending); returns the real executor."""
    real = rig.worker.executors.get(task_type)

    async def dies(ctx: ExecutionContext) -> ExecResult:
        await real(ctx)
        raise asyncio.CancelledError  # the process is killed here

    rig.worker.executors.register(task_type, dies)
    return real


async def test_a_worker_killed_after_its_commit_is_acknowledged_on_reclaim_without_paying_twice(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    real = _killed_after_commit(rig, L1)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    with pytest.raises(asyncio.CancelledError):
        await rig.worker.handle(await rig.next(L1))
    rig.worker.executors.register(L1, real)
    assert len(scripted_llm.calls("L1")) == 1
    assert await rig.backend.get_timer(L2_TIMER.key("acme", "s1")) is None  # no cascade yet

    rig.clock.advance(61)
    [again] = await rig.backend.reclaim(
        "w2", min_idle_ms=60_000, count=1, max_deliveries=5, now=rig.clock.now()
    )
    assert await rig.worker.handle(again) is Outcome.RECOVERED
    assert len(scripted_llm.calls("L1")) == 1  # not paid for twice
    assert (await rig.backend.depth()).in_flight == 0
    assert await rig.backend.get_timer(L2_TIMER.key("acme", "s1")) is not None  # cascaded
    assert rig.worker.metrics.recovered == 1


async def test_a_redelivery_whose_execution_left_no_receipt_runs_again(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.push_for("L1", Reply.error(500), Reply.error(500), Reply.error(500))
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.backend.enqueue(Task(L1, "acme", "s1"), now=rig.clock.now())
    first = await rig.next(L1)
    stamp = Attempt(first.task.id, 0, first.deliveries, None, "gone", rig.clock.now())
    assert await rig.backend.stamp(first, stamp, now=rig.clock.now())  # started, then died
    rig.clock.advance(61)
    [again] = await rig.backend.reclaim(
        "w2", min_idle_ms=60_000, count=1, max_deliveries=5, now=rig.clock.now()
    )
    assert again.stamp == stamp
    scripted_llm.on("L1", l1_reply)
    assert await rig.worker.handle(again) in (Outcome.COMPLETED, Outcome.POSTPONED)
    assert len(scripted_llm.calls("L1")) >= 1


async def test_the_reconciler_reports_authority_and_findings_and_changes_nothing(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    b, evidence, store = rig.backend, rig.memory.evidence, rig.memory.store
    assert evidence is not None and isinstance(store, SqliteStore)

    async def read(tenant: str, task_id: str) -> Receipt | None:
        return evidence.receipt(Scope(tenant), task_id)

    settings = rig.worker.settings
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.memory.capture("acme", "s2", TURNS)
    real = _killed_after_commit(rig, L1)
    for session in ("s1", "s2", "s3"):
        await b.enqueue(Task(L1, "acme", session), now=rig.clock.now())
    for _ in range(2):  # s1 and s2 commit, then their worker dies
        with pytest.raises(asyncio.CancelledError):
            await rig.worker.handle(await rig.next(L1))
    rig.worker.executors.register(L1, real)
    waiting = await rig.next(L1)  # s3: taken, never started
    await rig.worker.publish_status()
    s2 = next(i.delivery for i in await b.in_flight(limit=10, now=rig.clock.now())
              if i.delivery.task.session == "s2")  # fmt: skip
    with store.writing() as conn:  # s2's receipt edited by hand
        conn.execute("UPDATE layer_receipts SET result = '{}' WHERE task_id = ?", (s2.task.id,))

    def summary(reports: list[Report]) -> list[tuple[str | None, str, str, bool]]:
        return [(r.task.session, r.authority.value, r.finding.value, r.may_submit_completion)
                for r in reports]  # fmt: skip

    now = rig.clock.now()
    assert summary(await reconcile(b, read, settings, now=now)) == [
        ("s1", "current", "completion observed", False),
        ("s2", "current", "receipt conflict", False),
        ("s3", "current", "no execution expected", False),
    ]
    assert summary(await reconcile(b, None, settings, now=now))[0][2] == "receipt unavailable"

    async def log(tenant: str, task_id: str) -> list[Execution]:
        return evidence.executions(Scope(tenant), task_id)

    reports = await reconcile(b, read, settings, now=now, executions=log)
    assert [None if r.logged is None else (r.logged.outcome, r.logged.committed_at is not None)
            for r in reports] == [("cancelled", True), ("cancelled", True), None]  # fmt: skip
    stamp = reports[0].stamp
    assert stamp is not None and reports[0].to_json()["logged"]["attempt"] == stamp.to_json()
    later = now + settings.reclaim_idle_ms / 1000
    assert summary(await reconcile(b, read, settings, now=later)) == [
        ("s1", "delivery lease expired", "completion observed", True),
        ("s2", "delivery lease expired", "receipt conflict", False),
        ("s3", "delivery lease expired", "no execution expected", False),
    ]
    await rig.worker.publish_status(stopped=True)
    s1_lock = lock_key_for(Task(L1, "acme", "s1"), LockScope.SESSION)
    assert s1_lock is not None
    await b.acquire_lock(s1_lock, "someone", ttl_ms=1000, now=now)  # a newer grant
    assert summary(await reconcile(b, read, settings, now=now)) == [
        ("s1", "fenced", "completion observed", True),
        ("s2", "worker offline", "receipt conflict", False),
        ("s3", "current", "no execution expected", False),
    ]
    assert len(await b.in_flight(limit=10, now=now)) == 3 and waiting.stamp is None



def impatient(rig: Rig) -> Worker:
    """A worker of the rig's registry that drops a task at once when its lock is busy."""
    settings = PipelineSettings(retry_limit=1, l2_delay_s=60, lock_wait_max_s=0)
    return Worker(rig.backend, rig.worker.executors, settings, clock=rig.clock, name="w2",
                  sleep=_no_sleep)  # fmt: skip


async def test_an_l3_dropped_on_a_busy_lock_is_submitted_again(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """The old recovery re-armed L3 only past `l3_every_memories` memories: an L3 queued by the
    L2 cascade and dropped on a busy tenant lock was never run, and the profile stayed behind
    the scenes for good."""
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.tick()
    assert await rig.run_next(L1) is Outcome.COMPLETED
    rig.clock.advance(60)
    await rig.worker.pump_once()
    assert await rig.run_next(L2) is Outcome.COMPLETED  # scenes changed: L3 queued
    assert await rig.backend.acquire_lock("tenant/acme", "other", ttl_ms=10**6, now=rig.clock.now())
    assert await impatient(rig).handle(await rig.next(L3)) is Outcome.DROPPED
    await rig.backend.release_lock("tenant/acme", "other")
    assert rig.memory.layers is not None and rig.memory.layers.profile(SCOPE) is None

    rig.clock.advance(600)  # the grace period
    assert [t.type for t in await rig.tick()] == [L3]
    assert await rig.run_next(L3) is Outcome.COMPLETED
    assert rig.memory.layers.profile(SCOPE) is not None
    assert rig.memory.backlog is not None
    assert rig.memory.backlog.tenants_owing_l3(None, 30, 10) == []


async def test_a_flush_dropped_on_a_busy_lock_is_submitted_again(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """An accepted flush was a task only: dropped on a busy session lock, it was gone."""
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", TURNS)
    await rig.memory.request_flush("acme", "s1", rig.clock.now())  # what `POST …/flush` does
    await rig.backend.enqueue(Task(FLUSH, "acme", "s1"), now=rig.clock.now())
    assert await rig.backend.acquire_lock(LOCK_KEY, "other", ttl_ms=10**6, now=rig.clock.now())
    assert await impatient(rig).handle(await rig.next(FLUSH)) is Outcome.DROPPED
    await rig.backend.release_lock(LOCK_KEY, "other")

    rig.clock.advance(600)
    assert sorted(t.type for t in await rig.tick()) == [L1, FLUSH]
    await rig.run_next(L1)
    assert await rig.run_next(FLUSH) is Outcome.COMPLETED
    assert rig.memory.layers is not None and rig.memory.backlog is not None
    assert rig.memory.backlog.flush_requests(None, 10) == []
    assert rig.memory.layers.session_state(SCOPE, "s1").pending_turns == 0


async def test_two_sessions_of_a_tenant_pay_for_one_l2(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """L2 consolidates the tenant's memories, whichever session asked. Locked per session, the
    L2s of two sessions ran side by side: two LLM calls, and the second commit was refused (its
    mark had moved) and retried. Locked per tenant, the second waits and finds nothing left."""
    install_layer_handlers(scripted_llm)
    for session in ("s1", "s2"):
        await rig.memory.capture("acme", session, TURNS)
        await rig.backend.enqueue(Task(L1, "acme", session), now=rig.clock.now())
        assert await rig.run_next(L1) is Outcome.COMPLETED
    for session in ("s1", "s2"):
        await rig.backend.enqueue(Task(L2, "acme", session, {"force": True}),
                                  now=rig.clock.now())  # fmt: skip
    first, second = await rig.next(L2), await rig.next(L2)
    waiting = Worker(rig.backend, rig.worker.executors, PipelineSettings(retry_limit=1),
                     clock=rig.clock, name="w3", sleep=lambda s: asyncio.sleep(0.001))
    outcomes = await asyncio.gather(rig.worker.handle(first), waiting.handle(second))
    assert sorted(outcomes) == sorted([Outcome.COMPLETED, Outcome.SKIPPED])
    assert len(scripted_llm.calls("L2")) == 1
