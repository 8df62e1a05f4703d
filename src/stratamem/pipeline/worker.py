"""The worker: N concurrent consumers per process, locks with fencing, retries, the cascade.

One delivery goes through `Worker.handle`:
0. a redelivery of a task whose previous execution started (`Delivery.stamp`) is looked up
   first: when that execution's authentic receipt is in the store, its result cascades and the
   delivery is acknowledged without running the task again (`Outcome.RECOVERED`);
1. take the task's lock (see `timers.lock_key_for`) while checking the delivery is still ours
   and extending it (`PipelineBackend.acquire_for`, one round trip, which also stamps the
   delivery when the registry keeps no execution log); on conflict wait locally with backoff
   (200 ms, times 3, capped at 5 s) until one lock TTL has passed, then drop and ack the task
   (a type its part registered `WhenBusy.SKIP`, as offload's diagram task, is skipped at once);
   its work is still owed in the store, where the backlog scheduler finds it again
   (`pipeline.scheduler`);
2. check the delivery is still ours (`extend`, for a lockless task; a start recorded for a
   reclaimed delivery would fence its new owner's execution), record the execution's start in the
   execution log, when the registry has one (`stratamem.store.evidence.executions`: it records the
   lock's token as a fence, fences the open executions of the task and lock, and refuses a start
   under a stale token), stamp the delivery with it (`Attempt`: attempt, delivery count, fencing
   token, worker, start time; `PipelineBackend.stamp`, which also checks the delivery is still
   ours), then run the executor while a keeper heartbeats the delivery and then renews the lock
   every quarter of the TTL; if either fails or errors, the executor is cancelled at once, the lock
   released and the task neither acknowledged nor cascaded (another worker will take it over);
   when the store refuses the start or a fenced write because it holds a token above the
   backend's counter (the backend lost its state: a Redis restart), or holds the grant's very
   token from another owner (the counter granted it twice), the counter is raised to it and the
   task is put back at once without spending an attempt (`pipeline.fencing.behind_the_store`);
3. record the execution's end in the log (before the lock is released); on success: the
   registry's cascade (`ExecutorRegistry.cascade`: the layers' L1 -> L2 -> L3) (still under the
   lock), release, enqueue what the executor asked for after release, ack (with nothing to
   enqueue, a consumer's release and ack go with its next read: they take, or wait for, its
   next task in the same round trip, `release_ack_and_consume`); on failure: release, then
   retry with backoff 5 s · 3^attempt up to the retry limit, then a dead letter with the error
   and the session's timers cleared. A failure that is `Postponed` (a service known down, e.g.
   an LLM endpoint's open circuit breaker) puts the task back after the wait it names without
   spending an attempt. Retry, dead letter and ack are owner-checked: when the delivery was
   reclaimed meanwhile they change nothing and the outcome is `ABORTED`.

The worker consumes and reclaims only the task types its registry runs (routing). Its consumers
say when they are free (at start, and after each task) through the backend
(`pipeline.wakeup.FreeSignal`), so the backlog scheduler refills the queue at once.

Time comes from the injected clock and waits go through the injected `sleep`, so tests drive
conflicts, renewals and retries with a `ManualClock` and never sleep.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from enum import StrEnum
from typing import Any

from stratamem.cancelling import cancel_and_wait
from stratamem.clock import Clock, SystemClock
from stratamem.errors import (
    LockLost,
    PipelineError,
    Postponed,
    StaleFencingToken,
    StratamemError,
    Throttled,
)
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.errors import (
    DeadLetterNotFound,
    DeliveryLost,
    RetryLater,
    UnknownTaskType,
)
from stratamem.pipeline.executors import (
    ExecResult,
    ExecutionContext,
    Executor,
    ExecutorRegistry,
    WhenBusy,
)
from stratamem.pipeline.fencing import behind_the_store, resync_reason
from stratamem.pipeline.metrics import RunningTask, WorkerMetrics
from stratamem.pipeline.reconcile import matches
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import RUNNING, STOPPED, WORKERS_SCOPE, expired
from stratamem.pipeline.task import Delivery, LockGrant, Task
from stratamem.pipeline.timers import TimerPump, clear_session_timers, lock_key_for
from stratamem.pipeline.wakeup import FreeSignal
from stratamem.store.evidence.executions import ExecutionStart
from stratamem.store.evidence.receipts import Attempt

log = logging.getLogger(__name__)
FIRST_COMPLETED = asyncio.FIRST_COMPLETED
#: The longest wait a throttled service's Retry-After can impose on a task's retry.
MAX_THROTTLED_DELAY_S = 3600.0

Sleep = Callable[[float], Awaitable[None]]
BACKEND_ERROR_PAUSE_S = 1.0
#: Errors a consumer or duty loop survives (one warning line, counted, a pause): the store's
#: and the backend's, raw ones included (a `sqlite3` error on the receipt read of a redelivery
#: stopped the whole worker). The delivery it was handling stays pending and is reclaimed.
LOOP_ERRORS = (StratamemError, sqlite3.Error, OSError)


class Outcome(StrEnum):
    COMPLETED = "completed"
    SKIPPED = "skipped"
    RETRIED = "retried"
    POSTPONED = "postponed"
    DEAD = "dead"
    DROPPED = "dropped"
    ABORTED = "aborted"
    RECOVERED = "recovered"  # a redelivery whose previous execution had committed: acknowledged


#: The outcome the execution log records for an execution cut short by shutdown.
CANCELLED = "cancelled"


def _log_outcome(result: ExecResult | Exception) -> str:
    """What the execution log records when the executor returned `result`."""
    if isinstance(result, LockLost | StaleFencingToken):
        return Outcome.ABORTED
    if isinstance(result, Exception):
        return "failed"
    return Outcome.SKIPPED if result.skipped else Outcome.COMPLETED


class Worker:
    def __init__(
        self,
        backend: PipelineBackend,
        executors: ExecutorRegistry,
        settings: PipelineSettings,
        *,
        clock: Clock | None = None,
        name: str | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.backend = backend
        self.executors = executors
        self.settings = settings
        self.clock = clock or SystemClock()
        self.name = name or f"worker-{uuid.uuid4().hex[:8]}"
        self.metrics = WorkerMetrics()
        self._sleep = sleep
        self._pump = TimerPump(backend, self.clock, batch=settings.pump_batch)
        # (delivery, lease time) pairs taken over by `reclaim_once`, for idle consumers
        self._reclaimed: asyncio.Queue[tuple[Delivery, float]] = asyncio.Queue()
        self._stopping = asyncio.Event()
        self._idle_consumers = 0
        self._free = FreeSignal(backend, self.executors.types, sleep)
        # the release and ack each consumer's last task owes, sent with its next read (`_next`,
        # `release_ack_and_consume`); None when it owes nothing
        self._owed: dict[str, tuple[Delivery, LockGrant | None] | None] = {}
        self._healed_through = float("-inf")  # dead letters looked at up to this answer
        self._heal_looked_at = float("-inf")

    # -- one delivery -----------------------------------------------------------------------

    async def handle(self, delivery: Delivery) -> Outcome:
        """Process one delivery to its end (see the module docstring); returns what happened."""
        task = delivery.task
        self.metrics.consumed += 1
        if delivery.stamp is not None and await self._finished_before(delivery):
            return Outcome.RECOVERED
        lock_key = lock_key_for(task, self.settings.lock_scope)
        taken = await self._take_lock(delivery, lock_key)
        if isinstance(taken, Outcome):
            return taken
        grant, stamped = taken
        try:
            attempt = stamped or await self._start(delivery, lock_key, grant)
        except StaleFencingToken as exc:
            return await self._refused(delivery, grant, exc)
        except Exception as exc:  # noqa: BLE001 - the store's error: the task fails, as an executor's
            await self._release(grant)
            return await self._fail(delivery, exc)
        if attempt is None or (stamped is None and not await self._stamped(delivery, attempt)):
            return await self._on_stale(delivery, grant, "it was reclaimed before it started")
        now = attempt.started_at
        executed = self.metrics.executed
        executed[task.type.name] = executed.get(task.type.name, 0) + 1
        self.metrics.running[task.id] = RunningTask(
            task.id, task.type.name, task.tenant, task.session, lock_key, task.attempt, now
        )
        try:
            return await self._execute(delivery, lock_key, grant, attempt)
        finally:
            self.metrics.running.pop(task.id, None)

    async def _take_lock(
        self, delivery: Delivery, lock_key: str | None
    ) -> Outcome | tuple[LockGrant | None, Attempt | None]:
        """The task's lock and the stamp taken with it (`_acquire`; nothing for a lockless
        task), or the outcome of a delivery that cannot start: its lock stayed busy, or it is
        no longer ours."""
        if lock_key is None:
            return None, None
        try:
            grant, stamped = await self._acquire(delivery, lock_key)
        except DeliveryLost:
            return await self._on_stale(delivery, None, "it was reclaimed before it started")
        if grant is None:
            return await self._on_conflict(delivery)
        return grant, stamped

    async def _start(
        self, delivery: Delivery, lock_key: str | None, grant: LockGrant | None
    ) -> Attempt | None:
        """This execution, recorded in the execution log if there is one (which sets its start
        time, and refuses it when a newer token of its lock started). None when the delivery
        is no longer ours: that is checked first, as recording the start fences the open
        executions of the task, which would include its new owner's (a grant was taken with
        that check, `acquire_for`; without a log, the stamp checks it)."""
        task, token = delivery.task, None if grant is None else grant.token
        executions = self.executors.executions
        if executions is None:
            return self._attempt(delivery, token)
        if grant is None and not await self.backend.extend(delivery, now=self.clock.now()):
            return None
        start = ExecutionStart(task.id, task.type.name, task.session, lock_key, task.attempt,
                               delivery.deliveries, token, self.name,
                               None if grant is None else grant.owner)  # fmt: skip
        return await executions.started(task.tenant, start, self.clock)

    async def _stamped(self, delivery: Delivery, attempt: Attempt) -> bool:
        """Stamp the delivery with its started execution; False (the execution recorded as
        aborted) when the delivery was reclaimed meanwhile."""
        if await self.backend.stamp(delivery, attempt, now=attempt.started_at):
            return True
        await self._ended(delivery.task, attempt, Outcome.ABORTED)
        return False

    async def _ended(self, task: Task, attempt: Attempt, outcome: str) -> None:
        """Record the end of the execution (before its lock is released, so the next holder's
        start comes after it). A failure to record it is logged: the work is done either way."""
        executions = self.executors.executions
        if executions is None:
            return
        try:
            await executions.ended(task.tenant, attempt, outcome, self.clock)
        except Exception:  # the store's error, whatever its type: the outcome stands
            log.exception("could not record the end of %s %s", task.type, task.id)

    async def _finished_before(self, delivery: Delivery) -> bool:
        """Whether the execution a previous hand-over started committed (its authentic receipt,
        written by that very execution: see `reconcile`): then its result cascades and the
        delivery is acknowledged, without running the task (and paying for it) again."""
        reader, stamp, task = self.executors.receipts, delivery.stamp, delivery.task
        if reader is None or stamp is None:
            return False
        receipt = await reader(task.tenant, task.id)
        if receipt is None or not matches(stamp, receipt):
            return False
        result = receipt.result
        done = ExecResult(changed=bool(result.get("changed", True)),
                          skipped=bool(result.get("skipped", False)))  # fmt: skip
        await self.executors.cascade(self.backend, self.settings, task, done, self.clock.now())
        if await self.backend.ack(delivery):
            self.metrics.recovered += 1
            log.info("%s %s had finished before its worker stopped: acknowledged", task.type,
                     task.id)  # fmt: skip
        return True

    def _attempt(self, delivery: Delivery, token: int | None) -> Attempt:
        task = delivery.task
        return Attempt(task.id, task.attempt, delivery.deliveries, token, self.name,
                       self.clock.now())  # fmt: skip

    async def _acquire(
        self, delivery: Delivery, key: str
    ) -> tuple[LockGrant | None, Attempt | None]:
        """The lock (None: it stayed busy), taken while checking and extending the delivery
        (`DeliveryLost`); without an execution log the delivery is stamped in the same step,
        and that stamp is returned (with the grant's token)."""
        owner = f"{self.name}:{delivery.task.id}:{os.urandom(4).hex()}"
        ttl_ms = self.settings.lock_ttl_ms
        deadline = self.clock.now() + self.settings.lock_wait_s
        backoff = self.settings.lock_backoff_initial_s
        early = self.executors.executions is None
        while True:
            now = self.clock.now()
            stamp = self._attempt(delivery, None) if early else None
            grant = await self.backend.acquire_for(delivery, key, owner, ttl_ms=ttl_ms, now=now,
                                                   stamp=stamp)  # fmt: skip
            if grant is not None:
                return grant, None if stamp is None else replace(stamp, token=grant.token)
            if self._skips(delivery) or now >= deadline:
                return None, None
            await self._sleep(min(backoff, deadline - now))
            backoff = min(
                backoff * self.settings.lock_backoff_factor, self.settings.lock_backoff_cap_s
            )

    def _skips(self, delivery: Delivery) -> bool:
        """Whether a busy lock skips the task at once (`WhenBusy.SKIP`) instead of waiting."""
        return self.executors.when_busy(delivery.task.type) is WhenBusy.SKIP

    async def _on_conflict(self, delivery: Delivery) -> Outcome:
        self.metrics.lock_conflicts += 1
        await self.backend.ack(delivery)
        if self._skips(delivery):
            self.metrics.skipped += 1
            return Outcome.SKIPPED
        self.metrics.dropped += 1
        log.warning("dropped %s %s: its lock stayed busy", delivery.task.type, delivery.task.id)
        return Outcome.DROPPED

    async def _on_stale(self, delivery: Delivery, grant: LockGrant | None, why: str) -> Outcome:
        """The delivery was reclaimed, or its lock taken over, while we waited: leave it."""
        await self._release(grant)
        self.metrics.aborted += 1
        log.warning("%s %s did not start: %s", delivery.task.type, delivery.task.id, why)
        return Outcome.ABORTED

    async def _refused(
        self, delivery: Delivery, grant: LockGrant | None, exc: StaleFencingToken
    ) -> Outcome:
        """The store refused the execution's start."""
        if await behind_the_store(self.backend, grant, exc):
            return await self._resync(delivery, grant, exc)
        return await self._on_stale(delivery, grant, str(exc))

    async def _resync(
        self, delivery: Delivery, grant: LockGrant | None, exc: StaleFencingToken
    ) -> Outcome:
        """The store refused our grant because the backend's token counter had gone backwards
        below a token it accepted (now raised to it), or granted us a token the store accepted
        from another holder: release, and run the task again at once under a new grant,
        spending no attempt (nothing of it was written)."""
        await self._release(grant)
        task = delivery.task
        if not await self.backend.retry(delivery, task, due_at=self.clock.now()):
            return self._lost(delivery, "put back")
        self.metrics.postponed += 1
        log.warning("%s %s put back: %s (%s)", task.type, task.id, resync_reason(grant, exc), exc)
        return Outcome.POSTPONED

    async def _execute(
        self, delivery: Delivery, lock_key: str | None, grant: LockGrant | None, attempt: Attempt
    ) -> Outcome:
        ctx = ExecutionContext(
            task=delivery.task,
            lock_key=lock_key,
            fence_token=attempt.token,
            fence_owner=None if grant is None else grant.owner,
            clock=self.clock,
            enqueued_at=delivery.enqueued_at,
            attempt=attempt,
        )
        try:
            executor = self.executors.get(ctx.task.type)
            result = await self._run_guarded(executor, ctx, delivery, grant)
        except UnknownTaskType as exc:
            result = exc
        except LockLost as exc:
            result = exc
        except asyncio.CancelledError:
            await self._ended(ctx.task, attempt, CANCELLED)
            await self._release(grant)
            raise
        await self._ended(ctx.task, attempt, _log_outcome(result))
        if isinstance(result, StaleFencingToken) and await behind_the_store(
            self.backend, grant, result
        ):
            return await self._resync(delivery, grant, result)
        if isinstance(result, LockLost | StaleFencingToken):
            await self._release(grant)  # (a lost lock is not ours to release: that is a no-op)
            self.metrics.aborted += 1
            log.warning("aborted %s %s: %s", ctx.task.type, ctx.task.id, result)
            return Outcome.ABORTED
        if isinstance(result, Exception):
            await self._release(grant)
            return await self._fail(delivery, result)
        return await self._succeed(delivery, ctx, grant, result)

    async def _run_guarded(
        self, executor: Executor, ctx: ExecutionContext, delivery: Delivery, grant: LockGrant | None
    ) -> ExecResult | Exception:
        """Run the executor under the keeper. The executor's own error is returned as a value
        (it is the task's failure); errors of the keeper itself propagate (they are bugs). A
        job that ends at its first step (it needs no wait) ends before the keeper's first
        heartbeat would: it runs without one (a keeper task, its wait and its cancellation were
        a twentieth of a no-op task's CPU on Redis)."""
        job = asyncio.ensure_future(executor(ctx))
        try:
            await asyncio.sleep(0)  # the job's first step runs now
            lost = False if job.done() else await self._watch(job, delivery, grant)
        finally:
            if not job.done():
                job.cancel()
                await asyncio.wait({job})
        if lost:
            raise LockLost(f"lost the lock or lease of {ctx.task.type} {ctx.task.id}")
        error = job.exception()
        if error is None:
            return job.result()
        if isinstance(error, Exception):
            return error
        raise error

    async def _watch(
        self, job: asyncio.Future[ExecResult], delivery: Delivery, grant: LockGrant | None
    ) -> bool:
        """Wait for `job` while the keeper keeps its delivery and lock; whether the keeper
        ended first (one of them was lost)."""
        keeper = asyncio.ensure_future(self._keep_alive(delivery, grant))
        either: set[asyncio.Future[Any]] = {job, keeper}
        try:
            await asyncio.wait(either, return_when=FIRST_COMPLETED)
            return not job.done()
        finally:
            await cancel_and_wait(keeper)

    async def _keep_alive(self, delivery: Delivery, grant: LockGrant | None) -> None:
        """Heartbeat the delivery, then renew the lock; returns when either is lost. The
        delivery comes first: a worker paused past `reclaim_idle_ms` whose delivery was handed
        over must not hold the lock for another TTL against the delivery's new owner."""
        ttl_ms = self.settings.lock_ttl_ms
        while True:
            await self._sleep(self.settings.heartbeat_s)
            now = self.clock.now()
            try:
                if not await self.backend.extend(delivery, now=now):
                    break
                if grant is not None and not await self.backend.renew_lock(
                    grant.key, grant.owner, ttl_ms=ttl_ms, now=now
                ):
                    break
            except PipelineError:
                log.exception("renewing %s failed", delivery.task.id)
                break
        self.metrics.renew_failures += 1

    async def _succeed(
        self, delivery: Delivery, ctx: ExecutionContext, grant: LockGrant | None, res: ExecResult
    ) -> Outcome:
        now = self.clock.now()
        await self.executors.cascade(self.backend, self.settings, delivery.task, res, now)
        if ctx.after_release:
            await self._release(grant)
            for follow_up in ctx.after_release:
                await self.backend.enqueue(follow_up, now=now)
            await self.backend.ack(delivery)
        elif delivery.consumer in self._owed and not self._stopping.is_set():
            await self._settle(delivery.consumer)
            self._owed[delivery.consumer] = (delivery, grant)  # sent with its next read
        else:
            await self.backend.release_and_ack(delivery, grant)
        if res.skipped:
            self.metrics.skipped += 1
            return Outcome.SKIPPED
        self.metrics.completed += 1
        return Outcome.COMPLETED

    def _retry_delay_s(self, exc: Exception, attempt: int) -> float:
        """The executor's own `RetryLater` delay; else the backoff, or longer when a throttled
        service asked for a longer wait (an LLM endpoint's 429 with Retry-After)."""
        if isinstance(exc, RetryLater):
            return exc.delay_s
        backoff_s = self.settings.retry_delay_s(attempt)
        if isinstance(exc, Throttled) and exc.retry_after_s is not None:
            return min(max(backoff_s, exc.retry_after_s), MAX_THROTTLED_DELAY_S)
        return backoff_s

    async def _fail(self, delivery: Delivery, exc: Exception) -> Outcome:
        task, now = delivery.task, self.clock.now()
        if isinstance(exc, Postponed):  # a service known down: wait, spending no attempt
            due_at = now + min(max(exc.retry_after_s, 0.0), MAX_THROTTLED_DELAY_S)
            if not await self.backend.retry(delivery, task, due_at=due_at):
                return self._lost(delivery, "postpone")
            self.metrics.postponed += 1
            log.info("postponed %s %s to %.3f: %r", task.type, task.id, due_at, exc)
            return Outcome.POSTPONED
        self.metrics.failed += 1
        if task.attempt < self.settings.retry_limit:
            due_at = now + self._retry_delay_s(exc, task.attempt)
            if not await self.backend.retry(delivery, task.next_attempt(), due_at=due_at):
                return self._lost(delivery, "retry")
            self.metrics.retried += 1
            log.info("retrying %s %s at %.3f: %r", task.type, task.id, due_at, exc)
            return Outcome.RETRIED
        error = f"{type(exc).__name__}: {exc}"
        if await self.backend.dead_letter(delivery, error, now=now) is None:
            return self._lost(delivery, "dead-letter")
        if task.session is not None:
            await clear_session_timers(self.backend, task.tenant, task.session)
        self.metrics.dead_lettered += 1
        log.error(
            "dead-lettered %s %s after %d attempts: %r", task.type, task.id, task.attempt + 1, exc
        )
        return Outcome.DEAD

    def _lost(self, delivery: Delivery, what: str) -> Outcome:
        """The delivery was reclaimed while it ran: its new owner decides, not us."""
        self.metrics.aborted += 1
        log.warning("did not %s %s %s: it was reclaimed meanwhile", what, delivery.task.type,
                    delivery.task.id)  # fmt: skip
        return Outcome.ABORTED

    async def _release(self, grant: LockGrant | None) -> None:
        if grant is not None:
            await self.backend.release_lock(grant.key, grant.owner)

    # -- background duties ------------------------------------------------------------------

    async def pump_once(self) -> int:
        """Turn due timers into tasks; returns how many fired."""
        fired = len(await self._pump.run_once())
        self.metrics.timers_fired += fired
        return fired

    async def reclaim_once(self) -> int:
        """Take over deliveries of silent workers (when this process has spare capacity)."""
        spare = self._idle_consumers - self._reclaimed.qsize()
        if spare <= 0:  # reclaimed deliveries must not wait here unattended
            return 0
        now = self.clock.now()
        got = await self.backend.reclaim(
            f"{self.name}-reclaim",
            min_idle_ms=self.settings.reclaim_idle_ms,
            count=spare,
            max_deliveries=self.settings.max_deliveries,
            now=now,
            types=self.executors.types(),
        )
        for delivery in got:
            self._reclaimed.put_nowait((delivery, now))
        self.metrics.reclaimed += len(got)
        return len(got)

    async def publish_status(self, stopped: bool = False) -> None:
        """Publish counters, running tasks and LLM usage (`pipeline.status` reads them)."""
        status = {
            "name": self.name,
            "state": STOPPED if stopped else RUNNING,
            "updated_at": self.clock.now(),
            "concurrency": self.settings.concurrency,
            "types": [t.name for t in self.executors.types()],
            **self.metrics.snapshot(),
            "llm_usage": self.executors.usage(),
        }
        await self.backend.state_set(WORKERS_SCOPE, self.name, json.dumps(status))
        raw = await self.backend.state_get(WORKERS_SCOPE)
        gone = expired(raw, self.clock.now(), self.settings)
        if gone:
            await self.backend.state_delete(WORKERS_SCOPE, gone)

    # -- the loop ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop consuming; running tasks get `grace_period_s` to finish (see `run`)."""
        self._stopping.set()

    async def run(self) -> None:
        """Consume until `request_stop`, then drain within the grace period and return.

        If a consumer or duty loop dies of an unexpected error, the worker stops the same way
        and re-raises it (a worker never goes on silently with fewer consumers)."""
        consumers = [
            asyncio.ensure_future(self._consume_loop(f"{self.name}-{i}"))
            for i in range(self.settings.concurrency)
        ]
        duties = [
            asyncio.ensure_future(self._every(self.settings.pump_interval_s, self._duties)),
            asyncio.ensure_future(self._every(self.settings.reclaim_interval_s, self.reclaim_once)),
        ]
        stop = asyncio.ensure_future(self._stopping.wait())
        self._free.signal()
        done, _ = await asyncio.wait([stop, *consumers, *duties], return_when=FIRST_COMPLETED)
        # what ended the worker, read at once: an error of a later step must not leave it unseen
        errors = [t.exception() for t in done - {stop} if not t.cancelled()]
        self.request_stop()
        for duty in [stop, *duties]:
            if duty not in done:
                await cancel_and_wait(duty)
        _, late = await asyncio.wait(consumers, timeout=self.settings.grace_period_s)
        for consumer in late:
            await cancel_and_wait(consumer)
        await self._free.close()
        await self.publish_status(stopped=True)
        for error in errors:
            if error is not None:
                raise error

    async def _duties(self) -> int:
        await self.publish_status()
        fired = await self.pump_once()
        await self.heal_once()
        return fired

    async def heal_once(self) -> int:
        """Requeue the dead letters (of the types this worker runs) whose error is the trouble
        of a service the executors call (an LLM endpoint down, timing out, 5xx, rate limited)
        that has answered since they failed (`ExecutorRegistry.healed`). Looked at only when a
        service answered since the last look, and at most every `scheduler_park_refresh_s` (the
        dead letters are read as the scheduler reads them to park keys); returns how many were
        requeued."""
        answered, now = self.executors.answered_at(), self.clock.now()
        if answered is None or answered <= self._healed_through:
            return 0
        if now - self._heal_looked_at < self.settings.scheduler_park_refresh_s:
            return 0
        self._healed_through, self._heal_looked_at = answered, now
        types, requeued = set(self.executors.types()), 0
        for dead in await self.backend.list_dead(limit=self.settings.scheduler_dead_scan):
            if dead.task.type not in types or not self.executors.healed(dead.error,
                                                                        dead.failed_at):
                continue
            try:
                await self.backend.requeue_dead(dead.id, now=self.clock.now())
            except DeadLetterNotFound:  # another worker requeued it
                continue
            requeued += 1
            log.info("requeued %s %s: %s answers again", dead.task.type, dead.task.id,
                     "its endpoint")  # fmt: skip
        return requeued

    async def _consume_loop(self, consumer: str) -> None:
        """Take and handle deliveries until the worker stops and its last task is acknowledged
        (a delivery its last ack took is handled, even then: it is pending for it)."""
        self._owed[consumer] = None
        while not self._stopping.is_set() or self._owed[consumer] is not None:
            try:
                self._idle_consumers += 1
                try:
                    got = await self._next(consumer)
                finally:
                    self._idle_consumers -= 1
                for delivery, _leased_at in got:
                    await self._settle(consumer)  # (one is taken at a time: a no-op)
                    await self.handle(delivery)
                    self._free.signal()
            except LOOP_ERRORS as exc:
                self.metrics.loop_errors += 1
                log.warning("consumer %s: %s: %s (pausing %g s)", consumer, type(exc).__name__,
                            exc, BACKEND_ERROR_PAUSE_S)  # fmt: skip
                await self._sleep(BACKEND_ERROR_PAUSE_S)

    async def _next(self, consumer: str) -> list[tuple[Delivery, float]]:
        """The next deliveries with their lease time (the `now` the backend leased them at)."""
        now = self.clock.now()
        owed = self._owed[consumer]
        if owed is not None:
            return await self._ack_and_next(consumer, owed, now)
        if not self._reclaimed.empty():
            return [self._reclaimed.get_nowait()]
        got = await self.backend.consume(
            consumer, count=1, block_ms=self.settings.consume_block_ms, now=now,
            types=self.executors.types(),
        )  # fmt: skip
        return [(delivery, now) for delivery in got]

    async def _ack_and_next(
        self, consumer: str, owed: tuple[Delivery, LockGrant | None], now: float
    ) -> list[tuple[Delivery, float]]:
        """Release and ack the consumer's last task and take its next in one round trip,
        waiting for one unless reclaimed deliveries wait here (they come next) or the worker
        stops (then it takes none)."""
        delivery, grant = owed
        if self._stopping.is_set():
            await self._settle(consumer)
            return []
        block_ms = self.settings.consume_block_ms if self._reclaimed.empty() else 0
        _, got = await self.backend.release_ack_and_consume(
            delivery, grant, consumer=consumer, now=now, types=self.executors.types(),
            block_ms=block_ms,
        )  # fmt: skip
        self._owed[consumer] = None
        if got or block_ms or self._reclaimed.empty():
            return [(d, now) for d in got]
        return [self._reclaimed.get_nowait()]

    async def _settle(self, consumer: str) -> None:
        """Send the release and ack the consumer's last task owes, if any."""
        owed = self._owed.get(consumer)
        if owed is not None:
            await self.backend.release_and_ack(*owed)
            self._owed[consumer] = None

    async def _every(self, interval_s: float, duty: Callable[[], Awaitable[int | None]]) -> None:
        while True:
            try:
                await duty()
            except LOOP_ERRORS as exc:
                self.metrics.loop_errors += 1
                log.warning("%s: %s: %s", getattr(duty, "__name__", "duty"), type(exc).__name__,
                            exc)  # fmt: skip
            await asyncio.sleep(interval_s)
