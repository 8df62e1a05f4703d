"""Worker behaviour on both backends, with a manual clock: waits advance the clock, never sleep."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from stratamem.domain import Scope
from stratamem.errors import ConfigError, StaleFencingToken
from stratamem.layers.cascade import cascade
from stratamem.layers.task_types import FLUSH, L1, L2, L2_MAX_TIMER, L2_TIMER, L3
from stratamem.llm import LLMCircuitOpen, LLMRateLimited
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2, OFFLOAD_L15
from stratamem.pipeline.backend import retry_timer_key
from stratamem.pipeline.errors import RetryLater
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry, WhenBusy
from stratamem.pipeline.fencing import ensure_fences, fence_check
from stratamem.pipeline.locking import holding
from stratamem.pipeline.settings import LockScope, PipelineSettings
from stratamem.pipeline.task import Delivery, Task
from stratamem.pipeline.task_type import registered
from stratamem.pipeline.timers import (
    lock_key_for,
)
from stratamem.pipeline.worker import Outcome, Worker
from stratamem.store.evidence.executions import ExecutionStart, ThreadedExecutionLog
from stratamem.store.evidence.receipts import Attempt
from stratamem.store.evidence.store import SqlEvidenceStore
from stratamem.store.opening import open_url

from .conftest import Harness

Exec = Callable[[ExecutionContext], Awaitable[ExecResult]]


class Sleeper:
    """Injected `sleep`: lets runnable coroutines go first (as a real wait would), then records
    the wait and moves the manual clock."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.waits: list[float] = []
        self.hook: Callable[[], Awaitable[None]] | None = None

    async def __call__(self, seconds: float) -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        self.waits.append(round(seconds, 6))
        self.harness.clock.advance(seconds)
        if self.hook is not None:
            await self.hook()


def make_worker(harness: Harness, executor: Exec, **overrides: object) -> tuple[Worker, Sleeper]:
    sleeper = Sleeper(harness)
    settings = PipelineSettings(**overrides)  # type: ignore[arg-type]
    registry = ExecutorRegistry((t, executor) for t in registered())
    registry.add_cascade(cascade)  # the layers' L1 -> L2 -> L3
    worker = Worker(
        harness.backend, registry, settings, clock=harness.clock, name="w", sleep=sleeper
    )
    return worker, sleeper


async def deliver(harness: Harness, task: Task) -> Delivery:
    b = harness.backend
    await b.enqueue(task, now=harness.clock.now())
    while True:  # skip (ack) what earlier cascades queued
        [delivery] = await b.consume("c", count=1, block_ms=0, now=harness.clock.now())
        if delivery.task.id == task.id:
            return delivery
        await b.ack(delivery)


async def ok(ctx: ExecutionContext) -> ExecResult:
    return ExecResult()


async def boom(ctx: ExecutionContext) -> ExecResult:
    raise RuntimeError(f"boom on attempt {ctx.task.attempt}")


async def test_l1_success_acks_and_moves_l2_timer_earlier(harness: Harness) -> None:
    worker, _ = make_worker(harness, ok, l2_delay_s=60, l2_batch=3)
    b, t0 = harness.backend, harness.clock.now()
    assert (
        await worker.handle(await deliver(harness, Task(L1, "t", "s")))
        is Outcome.COMPLETED
    )
    assert (await b.depth()).in_flight == 0
    assert (await b.get_timer(L2_TIMER.key("t", "s")) or (0,))[0] == t0 + 60
    harness.clock.advance(10)
    await worker.handle(await deliver(harness, Task(L1, "t", "s")))
    assert (await b.get_timer(L2_TIMER.key("t", "s")) or (0,))[0] == t0 + 60
    await worker.handle(await deliver(harness, Task(L1, "t", "s")))
    assert (await b.get_timer(L2_TIMER.key("t", "s")) or (0,))[0] == t0 + 10
    assert await b.state_get("t/s") == {"l1_since_l2": "3"}
    assert worker.metrics.completed == 3 and worker.metrics.consumed == 3


async def test_l2_cascade_enqueues_l3_and_arms_max_interval(harness: Harness) -> None:
    results = iter([ExecResult(changed=True), ExecResult(changed=False), ExecResult(skipped=True)])

    async def l2(ctx: ExecutionContext) -> ExecResult:
        return next(results)

    worker, _ = make_worker(harness, l2, l2_max_interval_s=600)
    b, t0 = harness.backend, harness.clock.now()
    await worker.handle(await deliver(harness, Task(L2, "t", "s")))
    [l3] = await b.list_tasks(limit=10)
    assert (l3.type, l3.tenant, l3.session, l3.payload) == (
        L3,
        "t",
        None,
        {"session": "s"},
    )
    [l3_delivery] = await b.consume("c", count=1, block_ms=0, now=t0)
    await b.ack(l3_delivery)
    assert (await b.get_timer(L2_MAX_TIMER.key("t", "s")) or (0,))[0] == t0 + 600
    harness.clock.advance(5)
    assert (
        await worker.handle(await deliver(harness, Task(L2, "t", "s")))
        is Outcome.COMPLETED
    )
    assert await b.list_tasks(limit=10) == []
    assert (await b.get_timer(L2_MAX_TIMER.key("t", "s")) or (0,))[0] == t0 + 605
    harness.clock.advance(5)
    assert (
        await worker.handle(await deliver(harness, Task(L2, "t", "s"))) is Outcome.SKIPPED
    )
    assert (await b.get_timer(L2_MAX_TIMER.key("t", "s")) or (0,))[0] == t0 + 605


async def test_a_session_keeps_no_state_after_its_l2(harness: Harness) -> None:
    """Every session's count of L1s since its L2 ends with the L2 (done or with nothing to do),
    so the state does not grow with the sessions the pipeline has seen."""
    results = iter([ExecResult(changed=True), ExecResult(skipped=True)] * 200)

    async def run(ctx: ExecutionContext) -> ExecResult:
        return next(results) if ctx.task.type is L2 else ExecResult()

    worker, _ = make_worker(harness, run, l2_batch=2)
    b = harness.backend
    for i in range(200):
        await worker.handle(await deliver(harness, Task(L1, "t", f"s{i}")))
        await worker.handle(await deliver(harness, Task(L2, "t", f"s{i}")))
    assert [await b.state_get(f"t/s{i}") for i in range(200)] == [{}] * 200
    await worker.handle(await deliver(harness, Task(L1, "t", "s0")))
    assert await b.state_get("t/s0") == {"l1_since_l2": "1"}  # counting again from 0


async def test_failures_retry_with_backoff_then_dead_letter(harness: Harness) -> None:
    worker, _ = make_worker(harness, boom, retry_limit=3)
    b, t0 = harness.backend, harness.clock.now()
    task = Task(L1, "t", "s")
    await b.set_timer(L2_TIMER.key("t", "s"), Task(L2, "t", "s"), due_at=t0 + 9999)
    delivery = await deliver(harness, task)
    due = t0
    for attempt, delay in enumerate([5, 15, 45]):
        assert await worker.handle(delivery) is Outcome.RETRIED
        due += delay
        timer = await b.get_timer(retry_timer_key(task))
        assert timer is not None and timer[0] == due and timer[1].attempt == attempt + 1
        harness.clock.set(due - 0.001)
        assert await worker.pump_once() == 0
        harness.clock.set(due)
        assert await worker.pump_once() == 1
        [delivery] = await b.consume("c", count=1, block_ms=0, now=due)
    assert await worker.handle(delivery) is Outcome.DEAD
    [dead] = await b.list_dead(limit=10)
    assert dead.task.id == task.id and dead.task.attempt == 3
    assert dead.error == "RuntimeError: boom on attempt 3"
    assert await b.get_timer(L2_TIMER.key("t", "s")) is None
    depth = await b.depth()
    assert (depth.ready, depth.in_flight, depth.timers, depth.dead) == (0, 0, 0, 1)
    m = worker.metrics
    assert (m.failed, m.retried, m.dead_lettered) == (4, 3, 1)


async def test_executor_chooses_its_retry_time(harness: Harness) -> None:
    async def rate_limited(ctx: ExecutionContext) -> ExecResult:
        raise RetryLater(120, "429 from the LLM endpoint")

    worker, _ = make_worker(harness, rate_limited, retry_limit=1)
    task, t0 = Task(L2, "t", "s"), harness.clock.now()
    assert await worker.handle(await deliver(harness, task)) is Outcome.RETRIED
    timer = await harness.backend.get_timer(retry_timer_key(task))
    assert timer is not None and timer[0] == t0 + 120
    harness.clock.set(t0 + 120)
    await worker.pump_once()
    [again] = await harness.backend.consume("c", count=1, block_ms=0, now=t0 + 120)
    assert await worker.handle(again) is Outcome.DEAD
    [dead] = await harness.backend.list_dead(limit=1)
    assert dead.error == "RetryLater: 429 from the LLM endpoint"


async def test_an_open_circuit_postpones_the_task_without_spending_attempts(
    harness: Harness,
) -> None:
    """A dead LLM endpoint (its breaker open) is not the task's fault: the task waits as long
    as the breaker says, as often as needed, and still has all its attempts afterwards."""
    endpoint_up = False

    async def needs_the_llm(ctx: ExecutionContext) -> ExecResult:
        if not endpoint_up:
            raise LLMCircuitOpen("breaker open", retry_after_s=30.0)
        return ExecResult()

    worker, _ = make_worker(harness, needs_the_llm, retry_limit=1)
    task = Task(L1, "t", "s")
    delivery = await deliver(harness, task)
    for _ in range(5):  # more wake-ups than the retry limit allows failures
        now = harness.clock.now()
        assert await worker.handle(delivery) is Outcome.POSTPONED
        timer = await harness.backend.get_timer(retry_timer_key(task))
        assert timer is not None and timer[0] == now + 30.0
        harness.clock.advance(30.0)
        await worker.pump_once()
        [delivery] = await harness.backend.consume("c", count=1, block_ms=0,
                                                   now=harness.clock.now())  # fmt: skip
        assert delivery.task.attempt == 0
    endpoint_up = True
    assert await worker.handle(delivery) is Outcome.COMPLETED
    m = worker.metrics
    assert (m.postponed, m.failed, m.retried, m.dead_lettered) == (5, 0, 0, 0)


async def test_a_throttled_service_delays_the_retry_as_long_as_it_asked(harness: Harness) -> None:
    asked = iter([600.0, 1.0, None])

    async def throttled(ctx: ExecutionContext) -> ExecResult:
        raise LLMRateLimited("429", status=429, retry_after_s=next(asked))

    worker, _ = make_worker(harness, throttled, retry_limit=4)
    delivery = await deliver(harness, Task(L2, "t", "s"))
    waits = []
    for _ in range(3):
        now = harness.clock.now()
        assert await worker.handle(delivery) is Outcome.RETRIED
        timer = await harness.backend.get_timer(retry_timer_key(delivery.task))
        assert timer is not None
        waits.append(timer[0] - now)
        harness.clock.set(timer[0])
        await worker.pump_once()
        [delivery] = await harness.backend.consume("c", count=1, block_ms=0, now=timer[0])
    backoff = PipelineSettings().retry_delay_s
    assert waits == [600.0, backoff(1), backoff(2)]  # never sooner than our own backoff


async def test_lock_conflict_waits_with_backoff_then_drops(harness: Harness) -> None:
    worker, sleeper = make_worker(harness, ok, lock_ttl_ms=30_000)
    task = Task(L1, "t", "s")
    key = lock_key_for(task, LockScope.SESSION)
    assert key is not None
    now = harness.clock.now()
    assert await harness.backend.acquire_lock(key, "other", ttl_ms=3_600_000, now=now + 3600)
    # (SQLite: held until now + 7200 on the manual clock; Redis: one hour of server time.)
    assert await worker.handle(await deliver(harness, task)) is Outcome.DROPPED
    assert sleeper.waits == [0.2, 0.6, 1.8, 5.0, 5.0, 5.0, 5.0, 5.0, 2.4]
    assert (await harness.backend.depth()).in_flight == 0
    assert (worker.metrics.lock_conflicts, worker.metrics.dropped) == (1, 1)


async def test_lock_freed_while_waiting_is_taken(harness: Harness) -> None:
    worker, sleeper = make_worker(harness, ok)
    task = Task(L3, "t")
    key = lock_key_for(task, LockScope.SESSION)
    assert key == "tenant/t"
    now = harness.clock.now()
    await harness.backend.acquire_lock(key, "other", ttl_ms=3_600_000, now=now)

    async def free() -> None:
        if len(sleeper.waits) == 2:
            await harness.backend.release_lock(key, "other")

    sleeper.hook = free
    assert await worker.handle(await deliver(harness, task)) is Outcome.COMPLETED
    assert sleeper.waits[:2] == [0.2, 0.6]
    assert await harness.backend.fence_token(key) == 2


async def test_a_type_registered_to_skip_when_busy_is_skipped_at_once(harness: Harness) -> None:
    """The part that owns a type says what its task does with a busy lock (offload's diagram
    task: skip, the run holding the lock maps every entry); the worker names no type."""
    worker, sleeper = make_worker(harness, ok)
    worker.executors.register(OFFLOAD_L2, ok, WhenBusy.SKIP)
    task = Task(OFFLOAD_L2, "t", "s")
    key = lock_key_for(task, LockScope.SESSION)
    assert key is not None
    await harness.backend.acquire_lock(key, "other", ttl_ms=3_600_000, now=harness.clock.now())
    assert await worker.handle(await deliver(harness, task)) is Outcome.SKIPPED
    assert sleeper.waits == []


async def test_lost_lock_cancels_executor_without_ack_or_cascade(harness: Harness) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(ctx: ExecutionContext) -> ExecResult:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ExecResult()

    worker, sleeper = make_worker(harness, slow)
    parked, gate = asyncio.Event(), asyncio.Event()

    async def hold_keeper() -> None:
        parked.set()
        await gate.wait()

    sleeper.hook = hold_keeper
    task = Task(L1, "t", "s")
    key = lock_key_for(task, LockScope.SESSION)
    assert key is not None
    running = asyncio.create_task(worker.handle(await deliver(harness, task)))
    await started.wait()
    await parked.wait()
    await harness.lapse_lock(key)
    assert await harness.backend.acquire_lock(
        key, "thief", ttl_ms=3_600_000, now=harness.clock.now()
    )
    gate.set()
    assert await running is Outcome.ABORTED
    assert cancelled.is_set()
    assert (await harness.backend.depth()).in_flight == 1
    assert await harness.backend.state_get("t/s") == {}
    assert (worker.metrics.renew_failures, worker.metrics.aborted) == (1, 1)


async def test_a_delivery_reclaimed_while_paused_aborts_without_renewing_and_frees_its_lock(
    harness: Harness,
) -> None:
    """A worker paused past `reclaim_idle_ms` (but within the lock's TTL) whose delivery was
    handed to another consumer: its keeper sees the delivery gone before it renews the lock, and
    the abort releases the lock, so the delivery's new owner takes it at once."""
    async def slow(ctx: ExecutionContext) -> ExecResult:
        await asyncio.Event().wait()
        return ExecResult()

    worker, sleeper = make_worker(harness, slow)
    task = Task(L1, "t", "s")
    key = lock_key_for(task, LockScope.SESSION)
    assert key is not None
    renewed: list[str] = []
    renew = harness.backend.renew_lock

    async def counting_renew(k: str, owner: str, *, ttl_ms: int, now: float) -> bool:
        renewed.append(k)
        return await renew(k, owner, ttl_ms=ttl_ms, now=now)

    harness.backend.renew_lock = counting_renew  # type: ignore[method-assign]

    async def reclaim_once() -> None:
        sleeper.hook = None
        now = harness.clock.now()
        [taken] = await harness.backend.reclaim("thief", min_idle_ms=0, count=1,
                                                max_deliveries=5, now=now)  # fmt: skip
        assert taken.task.id == task.id

    sleeper.hook = reclaim_once
    assert await worker.handle(await deliver(harness, task)) is Outcome.ABORTED
    assert renewed == []
    now = harness.clock.now()
    assert await harness.backend.acquire_lock(key, "new owner", ttl_ms=1000, now=now)


async def test_stale_fencing_token_aborts(harness: Harness) -> None:
    async def stale(ctx: ExecutionContext) -> ExecResult:
        raise StaleFencingToken("newer token seen")

    worker, _ = make_worker(harness, stale)
    assert (
        await worker.handle(await deliver(harness, Task(L1, "t", "s"))) is Outcome.ABORTED
    )
    assert (await harness.backend.depth()).in_flight == 1
    assert await harness.backend.list_dead(limit=1) == []
    key, now = "session/t/s", harness.clock.now()
    assert await harness.backend.acquire_lock(key, "next", ttl_ms=1000, now=now)  # released


async def test_a_token_counter_behind_the_store_is_raised_and_the_task_runs_again(
    harness: Harness, tmp_path: Path
) -> None:
    """The backend lost its counters (a Redis restart) while the store kept token 20: the
    store's refusal raises the counter past 20 and puts the task back, spending no attempt."""
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    ensure_fences(conn)
    fence_check(conn, "session/t/s", 20)
    tokens: list[int | None] = []

    async def fenced(ctx: ExecutionContext) -> ExecResult:
        tokens.append(ctx.fence_token)
        fence_check(conn, ctx.lock_key or "", ctx.fence_token or 0, ctx.fence_owner)
        return ExecResult()

    worker, _ = make_worker(harness, fenced, retry_limit=0)
    task = Task(L1, "t", "s")
    assert await worker.handle(await deliver(harness, task)) is Outcome.POSTPONED
    assert await harness.backend.fence_token("session/t/s") == 20
    await worker.pump_once()  # put back at once
    [again] = await harness.backend.consume("c", count=1, block_ms=0, now=harness.clock.now())
    assert again.task == task  # the same attempt
    assert await worker.handle(again) is Outcome.COMPLETED
    assert tokens == [1, 21]
    assert await harness.backend.list_dead(limit=1) == []


@pytest.mark.parametrize(
    ("token", "owner", "case"),
    [
        (20, None, "its lock's token counter was behind the store"),
        (1, "other", "its lock's token was granted twice: the store accepted it from another"),
    ],
)
async def test_a_put_back_task_logs_which_refusal_it_was(
    harness: Harness,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    token: int,
    owner: str | None,
    case: str,
) -> None:
    """The store holds a token above the grant's 1, or 1 itself from another owner: both are
    put back, and the log line says which."""
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    ensure_fences(conn)
    fence_check(conn, "session/t/s", token, owner)

    async def fenced(ctx: ExecutionContext) -> ExecResult:
        fence_check(conn, ctx.lock_key or "", ctx.fence_token or 0, ctx.fence_owner)
        return ExecResult()

    worker, _ = make_worker(harness, fenced)
    task = Task(L1, "t", "s")
    caplog.set_level("WARNING", logger="stratamem.pipeline.worker")
    assert await worker.handle(await deliver(harness, task)) is Outcome.POSTPONED
    [line] = [r.getMessage() for r in caplog.records if "put back" in r.getMessage()]
    assert f"{task.id} put back: {case}" in line
    assert ("granted twice" in line) is (owner is not None)


async def test_a_held_lock_refused_by_the_store_raises_the_counter_for_the_next_holder(
    harness: Harness,
) -> None:
    """A waited flush (`locking.holding`) whose grant the store refused under a higher token."""
    settings, key = PipelineSettings(), "session/t/s"
    with pytest.raises(StaleFencingToken):
        async with holding(harness.backend, key, "api", settings, harness.clock) as grant:
            assert grant.token == 1
            raise StaleFencingToken("refused", newest=20)
    again = await harness.backend.acquire_lock(key, "next", ttl_ms=1000, now=harness.clock.now())
    assert again is not None and again.token == 21


async def test_a_held_lock_is_released_when_its_renewer_loses_a_cancellation(
    harness: Harness,
) -> None:
    """Python 3.11's `wait_for` / `timeout` inside a client library can lose a cancellation; the
    renewer of a waited flush then renewed its lock forever, and the API process answering it
    never stopped (found by tests/topology). The renewer here loses the first one."""
    entered, lost = asyncio.Event(), []

    async def losing_sleep(seconds: float) -> None:
        entered.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(seconds)  # goes on as if never cancelled: renews, sleeps again

    async def flush() -> None:
        async with holding(harness.backend, "session/t/s", "api", PipelineSettings(),
                           harness.clock, sleep=losing_sleep):  # fmt: skip
            await entered.wait()

    flushing = asyncio.ensure_future(flush())
    done, _ = await asyncio.wait({flushing}, timeout=10)
    flushing.cancel()  # (a renewer that runs on would keep it waiting: cut it short)
    assert done and lost
    now = harness.clock.now()
    assert await harness.backend.acquire_lock("session/t/s", "next", ttl_ms=1000, now=now)


async def test_executor_gets_token_and_enqueues_after_release(harness: Harness) -> None:
    seen: list[tuple[str | None, int | None]] = []
    follow_up = Task(L1, "t", "s", {"next": True})

    async def chain(ctx: ExecutionContext) -> ExecResult:
        seen.append((ctx.lock_key, ctx.fence_token))
        ctx.enqueue_after_release(follow_up)
        assert await harness.backend.list_tasks(limit=10) == [ctx.task]
        return ExecResult()

    worker, _ = make_worker(harness, chain)
    b = harness.backend
    assert (
        await worker.handle(await deliver(harness, Task(L1, "t", "s")))
        is Outcome.COMPLETED
    )
    assert await b.list_tasks(limit=10) == [follow_up]
    assert await b.acquire_lock("session/t/s", "next", ttl_ms=1000, now=harness.clock.now())
    [queued] = await b.consume("c", count=1, block_ms=0, now=harness.clock.now())
    await b.ack(queued)
    await worker.handle(await deliver(harness, Task(OFFLOAD_L1, "t", "s")))
    assert seen == [("session/t/s", 1), (None, None)]


async def test_tenant_lock_scope_setting(harness: Harness) -> None:
    keys: list[str | None] = []

    async def record(ctx: ExecutionContext) -> ExecResult:
        keys.append(ctx.lock_key)
        return ExecResult()

    worker, _ = make_worker(harness, record, lock_scope="tenant")
    for task_type in (L1, L2, FLUSH, OFFLOAD_L15):
        await worker.handle(await deliver(harness, Task(task_type, "t", "s")))
    assert keys == ["tenant/t", "tenant/t", "tenant/t", None]


@pytest.mark.parametrize("finish", [True, False])
async def test_graceful_stop(harness: Harness, finish: bool) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def waits(ctx: ExecutionContext) -> ExecResult:
        started.set()
        await release.wait()
        return ExecResult()

    sleeper_free = {"grace_period_s": 5.0 if finish else 0.01, "consume_block_ms": 20}
    worker, _ = make_worker(harness, waits, concurrency=2, **sleeper_free)
    task = Task(L1, "t", "s")
    await harness.backend.enqueue(task, now=harness.clock.now())
    run = asyncio.create_task(worker.run())
    await started.wait()
    worker.request_stop()
    if finish:
        release.set()
    await asyncio.wait_for(run, timeout=10)
    depth = await harness.backend.depth()
    assert depth.in_flight == (0 if finish else 1)
    key = lock_key_for(task, LockScope.SESSION)
    assert key is not None
    assert await harness.backend.acquire_lock(key, "next", ttl_ms=1000, now=harness.clock.now())
    assert worker.metrics.running == {}
    [published] = [json.loads(v) for v in (await harness.backend.state_get("_workers")).values()]
    assert published["name"] == "w"
    assert published["state"] == "stopped"  # its last word: not mistaken for a dead worker
    assert published["counters"]["completed"] == (1 if finish else 0)


async def test_free_consumers_wake_the_scheduler_of_their_types(harness: Harness) -> None:
    """A worker's consumers say they are free when they start and after each task, through
    the backend, so the backlog scheduler (in any process) refills the queue at once."""
    finished = asyncio.Event()

    async def done(ctx: ExecutionContext) -> ExecResult:
        finished.set()
        return ExecResult()

    settings = PipelineSettings(consume_block_ms=20, grace_period_s=1)
    registry = ExecutorRegistry([(L1, done)])
    worker = Worker(harness.backend, registry, settings, clock=harness.clock, name="w")
    scheduler = await harness.make_peer()
    run = asyncio.create_task(worker.run())
    assert await scheduler.wait_free([L1], timeout_s=10)  # started: free
    assert not await scheduler.wait_free([L2], timeout_s=0.01)  # it runs no L2
    await harness.backend.enqueue(Task(L1, "t", "s"), now=harness.clock.now())
    await asyncio.wait_for(finished.wait(), timeout=10)
    assert await scheduler.wait_free([L1], timeout_s=10)  # the task finished
    worker.request_stop()
    await asyncio.wait_for(run, timeout=10)


async def test_flush_moves_l2_timer_to_now(harness: Harness) -> None:
    worker, _ = make_worker(harness, ok, l2_delay_s=60)
    b, t0 = harness.backend, harness.clock.now()
    await worker.handle(await deliver(harness, Task(L1, "t", "s")))
    harness.clock.advance(1)
    await worker.handle(await deliver(harness, Task(FLUSH, "t", "s")))
    timer = await b.get_timer(L2_TIMER.key("t", "s"))
    assert timer is not None and timer[0] == t0 + 1 and timer[1].type is L2
    assert await worker.pump_once() == 1
    assert [t.type for t in await b.list_tasks(limit=10)] == [L2]


def test_settings_from_env_and_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAMEM_PIPELINE_BACKEND", "redis")
    monkeypatch.setenv("STRATAMEM_PIPELINE_LOCK_SCOPE", "tenant")
    settings = PipelineSettings()
    assert settings.backend == "redis" and settings.lock_scope is LockScope.TENANT
    assert [settings.retry_delay_s(n) for n in range(3)] == [5, 15, 45]
    assert settings.lock_wait_s == 120 and settings.heartbeat_s == 30
    with pytest.raises(ConfigError):
        PipelineSettings(lock_ttl_ms=60_000, reclaim_idle_ms=10_000)


async def test_a_crashed_consumer_stops_the_worker_and_surfaces(harness: Harness) -> None:
    async def broken_sleep(seconds: float) -> None:
        raise RuntimeError("injected sleep broke")

    async def slow(ctx: ExecutionContext) -> ExecResult:
        await asyncio.Event().wait()
        return ExecResult()

    settings = PipelineSettings(concurrency=2, consume_block_ms=20, grace_period_s=0)
    registry = ExecutorRegistry([(L1, slow)])
    worker = Worker(
        harness.backend, registry, settings, clock=harness.clock, name="w", sleep=broken_sleep
    )
    await harness.backend.enqueue(Task(L1, "t", "s"), now=harness.clock.now())
    with pytest.raises(RuntimeError, match="injected sleep broke"):
        await asyncio.wait_for(worker.run(), timeout=10)


async def test_the_execution_log_records_every_execution_and_refuses_stale_ones(
    harness: Harness, tmp_path: Path
) -> None:
    store = open_url(f"sqlite:{tmp_path / 'store.db'}", tmp_path / "store.db")
    evidence, scope = SqlEvidenceStore(store), Scope("t")
    try:
        worker, _ = make_worker(harness, ok)
        worker.executors.executions = ThreadedExecutionLog(evidence)
        done = Task(L1, "t", "s")
        assert await worker.handle(await deliver(harness, done)) is Outcome.COMPLETED
        worker.executors.register(L1, boom)
        failed = Task(L1, "t", "s")
        assert await worker.handle(await deliver(harness, failed)) is Outcome.RETRIED
        ran = evidence.executions(scope)
        assert [(r.attempt.task_id, r.outcome) for r in ran] == [(done.id, "completed"),
                                                                (failed.id, "failed")]  # fmt: skip
        assert all(r.end is not None and r.lock_key == "session/t/s" for r in ran)
        assert ran[0].attempt.token is not None and ran[1].attempt.token is not None
        assert ran[0].attempt.token < ran[1].attempt.token

        # the store accepted a token the backend's counter has not reached (the backend lost
        # its counters): the start is refused, so the task does not run; it is put back, and
        # the counter raised past the store's token for the next grant
        newer = ExecutionStart("x", "L1", "s", "session/t/s", 0, 1, 10**9, "other")
        evidence.start_execution(scope, newer, harness.clock)
        stale = Task(L1, "t", "s")
        assert await worker.handle(await deliver(harness, stale)) is Outcome.POSTPONED
        assert [r.attempt.task_id for r in evidence.executions(scope)][-1] == "x"
        assert await harness.backend.fence_token("session/t/s") == 10**9
    finally:
        store.close()


async def test_a_stale_hand_over_does_not_fence_the_live_owner_of_a_lockless_task(
    harness: Harness, tmp_path: Path
) -> None:
    """A worker holding a delivery that was reclaimed (offload-l1 takes no lock) checks that the
    delivery is still its own before it records its start: recording it first fenced the
    execution the delivery's new owner was running, so its writes were refused too."""
    store = open_url(f"sqlite:{tmp_path / 'store.db'}", tmp_path / "store.db")
    evidence, scope = SqlEvidenceStore(store), Scope("t")
    try:
        worker, _ = make_worker(harness, ok)
        worker.executors.executions = ThreadedExecutionLog(evidence)
        task = Task(OFFLOAD_L1, "t", "s")
        stale = await deliver(harness, task)
        now = harness.clock.now() + 61
        [live] = await harness.backend.reclaim("b", min_idle_ms=0, count=1, max_deliveries=5,
                                               now=now)  # fmt: skip
        running = ExecutionStart(task.id, task.type.name, "s", None, 0, live.deliveries, None,
                                 "other")  # fmt: skip
        evidence.start_execution(scope, running, harness.clock)
        assert await worker.handle(stale) is Outcome.ABORTED
        [row] = evidence.executions(scope, task.id)
        assert (row.attempt.worker, row.fenced_at, row.ended_at) == ("other", None, None)
    finally:
        store.close()


async def test_a_store_error_in_the_consume_loop_is_logged_counted_and_survived(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw `sqlite3` error on the receipt read of a redelivery stopped the whole worker; now
    the consumer logs it in one warning line, counts it, pauses and goes on consuming."""
    async def flaky_receipts(tenant: str, task_id: str) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    worker: Worker | None = None

    async def finish(ctx: ExecutionContext) -> ExecResult:
        assert worker is not None
        worker.request_stop()
        return ExecResult()

    sleeper = Sleeper(harness)
    settings = PipelineSettings(concurrency=1, consume_block_ms=20, grace_period_s=5)
    registry = ExecutorRegistry([(L1, finish)])
    registry.receipts = flaky_receipts
    worker = Worker(harness.backend, registry, settings, clock=harness.clock, name="w",
                    sleep=sleeper)  # fmt: skip
    b, first = harness.backend, Task(L1, "t", "s")
    delivery = await deliver(harness, first)
    attempt = Attempt(first.id, 0, 1, None, "gone", harness.clock.now())
    assert await b.stamp(delivery, attempt, now=harness.clock.now())
    now = harness.clock.now() + 61
    [handed] = await b.reclaim("w-0", min_idle_ms=0, count=1, max_deliveries=5, now=now)
    worker._reclaimed.put_nowait((handed, now))  # as reclaim_once hands it to a consumer
    await b.enqueue(Task(L1, "t", "other"), now=now)
    with caplog.at_level(logging.WARNING, logger="stratamem.pipeline.worker"):
        await asyncio.wait_for(worker.run(), timeout=30)
    assert worker.metrics.loop_errors == 1 and worker.metrics.completed == 1
    [warned] = [r for r in caplog.records if "disk I/O error" in r.getMessage()]
    assert warned.levelno == logging.WARNING and warned.exc_info is None
    assert (await b.depth()).in_flight == 1  # the failed redelivery stays pending: reclaimed
