"""Pipeline executors of the memory layers: `L1`, `L2`, `L3` and `flush`.

Each runs one `LayerService` stage under the worker's lock, with the task id (receipts, stable
ids) and the lock's fencing token and grant owner (`Fence(lock_key, token, owner)`), and maps
the stage result to the `ExecResult` the cascade reads. The registry also carries the layers'
backlog sources (`layers.backlog`): the backlog scheduler finds owed layer work through them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

from stratamem.clock import Clock
from stratamem.domain import Scope
from stratamem.errors import FenceResynced, ReceiptConflict
from stratamem.layers import scheduling
from stratamem.layers.backlog import layer_sources
from stratamem.layers.cascade import cascade
from stratamem.layers.model import FlushResult, StageResult
from stratamem.layers.service import LayerService, Run, StageBody
from stratamem.layers.task_types import FLUSH, L1, L2, L2_TIMER, L3
from stratamem.llm.client import LLMClient
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry
from stratamem.pipeline.locking import holding
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import TaskType, task_type
from stratamem.pipeline.timers import lock_key_for
from stratamem.store.backlog import BacklogStore
from stratamem.store.core.port import Fence
from stratamem.store.evidence.executions import ExecutionStart, ThreadedExecutionLog
from stratamem.store.evidence.port import EvidenceStore
from stratamem.store.evidence.receipts import Attempt, Receipt, ReceiptDraft
from stratamem.store.evidence.retention import ThreadedRetainedLog

log = logging.getLogger(__name__)
#: How many times a stage of a waited flush runs when the store keeps refusing its grant
#: because the backend's token counter went backwards (`FenceResynced`).
FLUSH_RESYNC_TRIES = 3


def _run(ctx: ExecutionContext) -> Run:
    return Run(ctx.task.tenant, ctx.task.id, ctx.task.session, ctx.fence, ctx.attempt)


def _result(stage: StageResult) -> ExecResult:
    return ExecResult(changed=stage.changed, skipped=stage.skipped)


class LayerExecutors:
    """The executors over one `LayerService`, with the layers' owed work (the backlog
    scheduler's sources); the service's evidence store is the pipeline's execution log and
    retention too. `backend` lets L2 re-arm its timer when early."""

    def __init__(
        self, service: LayerService, backlog: BacklogStore, backend: PipelineBackend | None = None
    ) -> None:
        self.service = service
        self.evidence = service.evidence
        self.backlog = backlog
        self.backend = backend

    async def l1(self, ctx: ExecutionContext) -> ExecResult:
        retry = ctx.task.payload.get("retry")
        if isinstance(retry, str):  # the automatic retry of a quarantined turn of the session
            return _result(await self.service.auto_retry(_run(ctx), retry))
        stage = await self.service.run_l1(_run(ctx))
        await self._l3_by_count(ctx)
        if stage.counts.get("left", 0) > 0:  # its attempts ran out: the batch goes on at once
            task = ctx.task
            ctx.enqueue_after_release(Task(L1, task.tenant, task.session, {"trigger": "continue"}))
        return _result(stage)

    async def flush(self, ctx: ExecutionContext) -> ExecResult:
        """L1 until the session is caught up (each batch under its receipt `<task>.<i>`; the
        session's flush requests made before it started are then completed), then the flush's
        own receipt, then an L2 that skips the delay (its cascade runs L3 when the scenes
        changed)."""
        run, started_at = _run(ctx), ctx.clock.now()
        done = await self._flushed(run)
        if done is not None:
            return done
        batches = await self.service.l1_until_caught_up(run)
        changed = any(stage.changed for stage in batches)
        await asyncio.to_thread(self.backlog.complete_flush, run.scope, ctx.task.session or "",
                                started_at)  # fmt: skip
        result = {"changed": changed, "skipped": False, "counts": {"batches": len(batches)}}
        draft = ReceiptDraft(run.task_id, FLUSH.name, ctx.clock.now(), result, attempt=run.attempt)
        await asyncio.to_thread(self.evidence.record_receipt, run.scope, draft, run.fence)
        await self._l3_by_count(ctx)
        task = ctx.task
        ctx.enqueue_after_release(Task(L2, task.tenant, task.session, {"force": True}))
        return ExecResult(changed=changed)

    async def _flushed(self, run: Run) -> ExecResult | None:
        """The result of this flush's authentic receipt, if an earlier attempt finished it."""
        receipt = await asyncio.to_thread(self.evidence.receipt, run.scope, run.task_id)
        if receipt is None:
            return None
        if not receipt.authentic:
            raise ReceiptConflict(f"flush {run.task_id}: its receipt does not verify")
        return ExecResult(changed=bool(receipt.result.get("changed")))

    async def l2(self, ctx: ExecutionContext) -> ExecResult:
        early = await self._rearm_if_early(ctx)
        if early:
            return ExecResult(changed=False, skipped=True)
        forced = bool(ctx.task.payload.get("force"))
        if not forced and not await self.service.l2_worth_running(Scope(ctx.task.tenant)):
            return ExecResult(changed=False, skipped=True)  # the next L1 or the quiet runs it
        return _result(await self.service.run_l2(_run(ctx)))

    async def l3(self, ctx: ExecutionContext) -> ExecResult:
        if not await self.service.l3_worth_running(Scope(ctx.task.tenant)):
            return ExecResult(changed=False, skipped=True)  # more memories, or the quiet, do
        return _result(await self.service.run_l3(_run(ctx)))

    async def _l3_by_count(self, ctx: ExecutionContext) -> None:
        scope = Scope(ctx.task.tenant)
        tenant = await asyncio.to_thread(self.service.layers.tenant_state, scope)
        if scheduling.l3_due_by_count(tenant, self.service.settings):
            reason = {"reason": "memories", "session": ctx.task.session}
            ctx.enqueue_after_release(Task(L3, ctx.task.tenant, None, reason))

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
        follow = Task(L2, task.tenant, task.session)
        key = L2_TIMER.key(task.tenant, task.session)
        await self.backend.set_timer_if_earlier(key, follow, due_at=earliest)
        return True

    async def receipt(self, tenant: str, task_id: str) -> Receipt | None:
        """The receipt of any task type (the store keeps them in one place)."""
        return await asyncio.to_thread(self.evidence.receipt, Scope(tenant), task_id)

    def registry(self, into: ExecutorRegistry | None = None) -> ExecutorRegistry:
        """Register the four executors and their cascade (into an existing registry, or a new
        one)."""
        registry = into or ExecutorRegistry()
        if self.service.llm is not None:
            registry.add_usage_source(self.service.llm.usage.snapshot)
        if isinstance(self.service.llm, LLMClient):  # its dead letters heal when it answers
            registry.add_health(self.service.llm)
        registry.receipts = self.receipt
        registry.executions = ThreadedExecutionLog(self.evidence)
        registry.retained = ThreadedRetainedLog(self.evidence)
        registry.register(L1, self.l1)
        registry.register(L2, self.l2)
        registry.register(L3, self.l3)
        registry.register(FLUSH, self.flush)
        registry.add_cascade(cascade)
        backlog, settings = self.backlog, self.service.settings
        registry.add_backlog(lambda grace_s: layer_sources(backlog, settings, grace_s))
        return registry


async def flush_in_turn(
    service: LayerService,
    backend: PipelineBackend,
    settings: PipelineSettings,
    clock: Clock,
    tenant: str,
    session: str,
) -> FlushResult:
    """Flush a session now, taking its turn with the session's pipeline work: each stage holds
    the lock the pipeline's task of that stage would hold (L1: the session's, L2: the
    tenant's L2 lock, L3: the tenant's), with its fencing token, so it neither races a running
    task nor is raced by one (a task meeting the lock waits, then runs on what the flush left).
    `LockBusy` when a lock stays held longer than `lock_wait_s`. A stage the store refused
    because the backend's token counter went backwards (`FenceResynced`: the backend lost its
    state, the counter is raised now) runs again under a new grant, up to
    `FLUSH_RESYNC_TRIES` times in all."""
    base, owner = f"flush-{uuid.uuid4().hex}", f"api-flush-{uuid.uuid4().hex[:8]}"

    def key(of_type: TaskType, of_session: str | None) -> str:
        found = lock_key_for(Task(of_type, tenant, of_session), settings.lock_scope)
        assert found is not None  # L1, L2 and L3 always lock
        return found

    async def in_turn(stage: str, of_session: str | None, body: StageBody) -> list[StageResult]:
        for tries_left in reversed(range(FLUSH_RESYNC_TRIES)):
            try:
                return await once(stage, of_session, body)
            except FenceResynced as exc:  # the backend lost its counters: now raised, go again
                if not tries_left:
                    raise
                log.warning("waited flush of %s/%s: %s stage again: %s", tenant, session, stage,
                            exc)  # fmt: skip
        raise AssertionError("unreachable")

    async def once(stage: str, of_session: str | None, body: StageBody) -> list[StageResult]:
        lock, task_id = key(task_type(stage), of_session), f"{base}.{stage}"
        async with holding(backend, lock, owner, settings, clock) as grant:
            start = ExecutionStart(task_id, stage, of_session, lock, 0, 0, grant.token, owner,
                                   grant.owner)  # fmt: skip
            async with _logged(service.evidence, tenant, start, clock) as attempt:
                fence = Fence(lock, grant.token, grant.owner)
                return await body(Run(tenant, task_id, of_session, fence, attempt, retried=False))

    return await service.flush(tenant, session, base, in_turn)


@contextlib.asynccontextmanager
async def _logged(
    evidence: EvidenceStore, tenant: str, start: ExecutionStart, clock: Clock
) -> AsyncIterator[Attempt]:
    """A stage of a waited flush as an execution of the log (`store.evidence.executions`), as a
    worker records its tasks: it takes its turn in the log with the tasks of the same lock."""
    scope = Scope(tenant)
    attempt = await asyncio.to_thread(evidence.start_execution, scope, start, clock)
    outcome = "failed"
    try:
        yield attempt
        outcome = "completed"
    finally:
        await asyncio.to_thread(evidence.end_execution, scope, attempt, outcome, clock)
