"""Pipeline executors of the memory layers: `L1`, `L2`, `L3` and `flush`.

Each runs one `LayerService` stage under the worker's lock, with the task id (receipts, stable
ids) and the lock's fencing token (`Fence(lock_key, token)`), and maps the stage result to the
`ExecResult` the cascade reads. `LayerScheduler` finds sessions whose L1 is due and enqueues it.
"""

from __future__ import annotations

import asyncio
import logging

from stratamem.clock import Clock
from stratamem.domain import Scope
from stratamem.errors import ReceiptConflict
from stratamem.layers import scheduling
from stratamem.layers.model import StageResult
from stratamem.layers.service import LayerService, Run
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry
from stratamem.pipeline.task import Task, TaskType
from stratamem.pipeline.timers import (
    L1_REQUESTED_AT_FIELD,
    L1_REQUESTED_FIELD,
    l2_max_timer_key,
    l2_timer_key,
    session_scope,
    tenant_scope,
)
from stratamem.store.base import Fence
from stratamem.store.receipts import Receipt, ReceiptDraft

log = logging.getLogger(__name__)
REQUEST_STALE_S = 3600.0
"""A request whose batch is still unprocessed after this long (dead-lettered) is made again."""
RECONCILED_AT_FIELD = "reconciled_at"
RECONCILE_EVERY_S = 60.0
"""How often the scheduler looks for layer work whose pipeline state was lost."""


def _run(ctx: ExecutionContext) -> Run:
    fence = None
    if ctx.lock_key is not None and ctx.fence_token is not None:
        fence = Fence(ctx.lock_key, ctx.fence_token)
    return Run(ctx.task.tenant, ctx.task.id, ctx.task.session, fence, ctx.attempt)


def _result(stage: StageResult) -> ExecResult:
    return ExecResult(changed=stage.changed, skipped=stage.skipped)


class LayerExecutors:
    """The executors over one `LayerService`; `backend` lets L2 re-arm its timer when early."""

    def __init__(self, service: LayerService, backend: PipelineBackend | None = None) -> None:
        self.service = service
        self.backend = backend

    async def l1(self, ctx: ExecutionContext) -> ExecResult:
        stage = await self.service.run_l1(_run(ctx))
        await self._l3_by_count(ctx)
        if stage.counts.get("left", 0) > 0:  # its attempts ran out: the batch goes on at once
            task = ctx.task
            ctx.enqueue_after_release(Task(TaskType.L1, task.tenant, task.session,
                                           {"trigger": "continue"}))  # fmt: skip
        return _result(stage)

    async def flush(self, ctx: ExecutionContext) -> ExecResult:
        """L1 until the session is caught up (each batch under its receipt `<task>.<i>`), then
        the flush's own receipt, then an L2 that skips the delay (its cascade runs L3 when the
        scenes changed)."""
        run = _run(ctx)
        done = await self._flushed(run)
        if done is not None:
            return done
        changed, batches = False, 0
        for i in range(1000):
            stage = await self.service.run_l1(Run(run.tenant, f"{run.task_id}.{i}",
                                                  run.session, run.fence, run.attempt))  # fmt: skip
            changed, batches = changed or stage.changed, i + 1
            if stage.skipped:
                break
        result = {"changed": changed, "skipped": False, "counts": {"batches": batches}}
        draft = ReceiptDraft(run.task_id, TaskType.FLUSH.value, ctx.clock.now(), result,
                             attempt=run.attempt)  # fmt: skip
        await asyncio.to_thread(self.service.layers.record_receipt, run.scope, draft, run.fence)
        await self._l3_by_count(ctx)
        task = ctx.task
        ctx.enqueue_after_release(Task(TaskType.L2, task.tenant, task.session, {"force": True}))
        return ExecResult(changed=changed)

    async def _flushed(self, run: Run) -> ExecResult | None:
        """The result of this flush's authentic receipt, if an earlier attempt finished it."""
        receipt = await asyncio.to_thread(self.service.layers.receipt, run.scope, run.task_id)
        if receipt is None:
            return None
        if not receipt.authentic:
            raise ReceiptConflict(f"flush {run.task_id}: its receipt does not verify")
        return ExecResult(changed=bool(receipt.result.get("changed")))

    async def l2(self, ctx: ExecutionContext) -> ExecResult:
        early = await self._rearm_if_early(ctx)
        if early:
            return ExecResult(changed=False, skipped=True)
        return _result(await self.service.run_l2(_run(ctx)))

    async def l3(self, ctx: ExecutionContext) -> ExecResult:
        return _result(await self.service.run_l3(_run(ctx)))

    async def _l3_by_count(self, ctx: ExecutionContext) -> None:
        scope = Scope(ctx.task.tenant)
        tenant = await asyncio.to_thread(self.service.layers.tenant_state, scope)
        if scheduling.l3_due_by_count(tenant, self.service.settings):
            reason = {"reason": "memories", "session": ctx.task.session}
            ctx.enqueue_after_release(Task(TaskType.L3, ctx.task.tenant, None, reason))

    async def _rearm_if_early(self, ctx: ExecutionContext) -> bool:
        """Move the L2 timer to the earliest allowed time when this L2 came too soon."""
        task = ctx.task
        if self.backend is None or task.session is None or task.payload.get("force"):
            return False
        scope = Scope(task.tenant)
        state = await asyncio.to_thread(self.service.layers.session_state, scope, task.session)
        tenant = await asyncio.to_thread(self.service.layers.tenant_state, scope)
        earliest = scheduling.l2_earliest(state, tenant, self.service.settings)
        if earliest <= ctx.clock.now():
            return False
        follow = Task(TaskType.L2, task.tenant, task.session)
        key = l2_timer_key(task.tenant, task.session)
        await self.backend.set_timer_if_earlier(key, follow, due_at=earliest)
        return True

    async def receipt(self, tenant: str, task_id: str) -> Receipt | None:
        """The receipt of any task type (the store keeps them in one place)."""
        return await asyncio.to_thread(self.service.layers.receipt, Scope(tenant), task_id)

    def registry(self, into: ExecutorRegistry | None = None) -> ExecutorRegistry:
        """Register the four executors (into an existing registry, or a new one)."""
        registry = into or ExecutorRegistry()
        if self.service.llm is not None:
            registry.add_usage_source(self.service.llm.usage.snapshot)
        registry.receipts = self.receipt
        registry.register(TaskType.L1, self.l1)
        registry.register(TaskType.L2, self.l2)
        registry.register(TaskType.L3, self.l3)
        registry.register(TaskType.FLUSH, self.flush)
        return registry


def register_executors(
    registry: ExecutorRegistry, service: LayerService, backend: PipelineBackend | None = None
) -> LayerExecutors:
    """Plug the memory layers into a worker's registry."""
    executors = LayerExecutors(service, backend)
    executors.registry(registry)
    return executors


class LayerScheduler:
    """Finds sessions whose L1 is due (turns past the cursor) and enqueues one L1 each.

    A request covers the next batch (`max_batch_turns` past the cursor). While it is in flight
    (the cursor below it) the session is not enqueued again unless the next batch grew beyond
    it or the request went stale, so a scan every second costs one query, not a task per session
    per scan; a backlog longer than one batch is requested batch by batch. It also reconciles
    (`reconcile`): L2 and L3 work the store says is owed but the pipeline lost is re-armed.
    """

    def __init__(
        self, service: LayerService, backend: PipelineBackend, clock: Clock, scan_limit: int = 500
    ) -> None:
        self.service = service
        self.backend = backend
        self.clock = clock
        self.scan_limit = scan_limit
        self._next_reconcile = float("-inf")

    async def run(self, stop: asyncio.Event, interval_s: float = 1.0) -> None:
        """Scan every `interval_s` until `stop` is set (run it beside a worker)."""
        while not stop.is_set():
            await self.tick()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            except TimeoutError:
                continue

    async def tick(self) -> list[Task]:
        """One scan; returns the L1 tasks enqueued. Every `RECONCILE_EVERY_S` it also runs
        `reconcile`."""
        now = self.clock.now()
        if now >= self._next_reconcile:
            self._next_reconcile = now + RECONCILE_EVERY_S
            await self.reconcile()
        sessions = await asyncio.to_thread(
            self.service.layers.sessions_with_pending_turns, self.scan_limit
        )
        enqueued: list[Task] = []
        for due in scheduling.due_l1(sessions, now, self.service.settings):
            if await self._request(due, now):
                enqueued.append(
                    Task(TaskType.L1, due.tenant, due.session, {"trigger": due.trigger.value})
                )
                await self.backend.enqueue(enqueued[-1], now=now)
        return enqueued

    async def reconcile(self) -> list[Task]:
        """Re-arm layer work whose pipeline state was lost (a Redis restart loses the queue and
        timers; Redis here keeps nothing on disk), from what the store says is owed:

        - a session whose last L1 came after its last L2, with no L2 timer armed: its L2 timer
          is armed for now (an L2 that comes too early moves its own timer);
        - a tenant with `l3_every_memories` memories since its last L3: an L3 is queued (one
          with nothing new is skipped without an LLM call).

        Each session or tenant is re-armed at most once per `REQUEST_STALE_S`, so work that keeps
        failing (a dead letter clears its session's timers) is not retried in a tight loop.
        Returns the tasks armed or queued."""
        now = self.clock.now()
        layers, settings = self.service.layers, self.service.settings
        armed: list[Task] = []
        for tenant, session in await asyncio.to_thread(layers.sessions_owing_l2, self.scan_limit):
            keys = (l2_timer_key(tenant, session), l2_max_timer_key(tenant, session))
            if any([await self.backend.get_timer(key) for key in keys]):
                continue
            if await self._first_in_a_while(session_scope(tenant, session), now):
                armed.append(Task(TaskType.L2, tenant, session, {"reason": "reconcile"}))
                await self.backend.set_timer_if_earlier(keys[0], armed[-1], due_at=now)
        owing = await asyncio.to_thread(
            layers.tenants_owing_l3, settings.l3_every_memories, self.scan_limit
        )
        for tenant in owing:
            if await self._first_in_a_while(tenant_scope(tenant), now):
                armed.append(Task(TaskType.L3, tenant, None, {"reason": "reconcile"}))
                await self.backend.enqueue(armed[-1], now=now)
        return armed

    async def _first_in_a_while(self, scope: str, now: float) -> bool:
        state = await self.backend.state_get(scope)
        if now - float(state.get(RECONCILED_AT_FIELD, "-inf")) < REQUEST_STALE_S:
            return False
        await self.backend.state_set(scope, RECONCILED_AT_FIELD, repr(now))
        return True

    async def _request(self, due: scheduling.L1Due, now: float) -> bool:
        """Record a request for the next batch unless one covering it is still in flight."""
        scope = session_scope(due.tenant, due.session)
        state = await self.backend.state_get(scope)
        target = min(due.upto_seq, due.cursor_seq + self.service.settings.max_batch_turns)
        requested = int(state.get(L1_REQUESTED_FIELD, "0"))
        fresh = now - float(state.get(L1_REQUESTED_AT_FIELD, "0")) < REQUEST_STALE_S
        if requested > due.cursor_seq and requested >= target and fresh:
            return False
        await self.backend.state_set(scope, L1_REQUESTED_FIELD, str(target))
        await self.backend.state_set(scope, L1_REQUESTED_AT_FIELD, repr(now))
        return True

def layer_registry() -> ExecutorRegistry:
    """The registry `stratamem worker --executors stratamem.layers.executors:layer_registry`
    loads: the layers over the store, embedder and LLM configured by `STRATAMEM_*` variables
    (offline mode when no LLM endpoint is configured), with the configured pipeline backend for
    re-arming early L2 timers. They live as long as the worker process."""
    from stratamem.core import AsyncMemory  # noqa: PLC0415 - runtime wiring, not a layer import
    from stratamem.pipeline.runner import open_backend  # noqa: PLC0415
    from stratamem.pipeline.settings import PipelineSettings  # noqa: PLC0415

    memory = AsyncMemory.open()
    backend = open_backend(PipelineSettings(), memory.settings.data_dir)
    return LayerExecutors(memory.layer_service(), backend).registry()
