"""The offload stages on the pipeline: executors for offload-l1/-l15/-l2 and the scheduler port.

    registry = ExecutorRegistry()
    offload = Offload(store, PipelineScheduler(backend, clock), llm=llm, clock=clock)
    register_executors(registry, offload)
    Worker(backend, registry, settings, clock=clock)

offload-l1 and offload-l15 run without a lock; offload-l2 runs under the session's diagram lock (a
task that finds it busy is skipped at once, `WhenBusy.SKIP`: the run holding it maps every entry)
and writes its diagrams under the lock's fencing token.
"""

from __future__ import annotations

import asyncio

from stratamem.clock import Clock
from stratamem.domain import Scope
from stratamem.errors import ReceiptConflict
from stratamem.llm.client import LLMClient
from stratamem.offload.backlog import offload_sources
from stratamem.offload.facade import Offload, mark_of
from stratamem.offload.schedule import Stage, StageTask
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2, OFFLOAD_L15
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry, WhenBusy
from stratamem.pipeline.task import Task
from stratamem.store.evidence.receipts import Receipt

_TYPES = {
    Stage.L1: OFFLOAD_L1,
    Stage.L15: OFFLOAD_L15,
    Stage.L2: OFFLOAD_L2,
}


def to_task(task: StageTask) -> Task:
    return Task(_TYPES[task.stage], task.tenant, task.session, dict(task.payload))


class PipelineScheduler:
    """The offload scheduler port on a pipeline backend (SQLite or Redis)."""

    def __init__(self, backend: PipelineBackend, clock: Clock) -> None:
        self._backend = backend
        self._clock = clock

    async def enqueue(self, task: StageTask) -> None:
        await self._backend.enqueue(to_task(task), now=self._clock.now())

    async def arm(self, key: str, task: StageTask, due_at: float) -> None:
        await self._backend.set_timer_if_earlier(key, to_task(task), due_at=due_at)


def _where(ctx: ExecutionContext) -> tuple[str, str]:
    return ctx.task.tenant, ctx.task.session or ""


class OffloadExecutors:
    """The three offload executors over one `Offload`. Each first looks for the task's own
    receipt: an earlier attempt that committed is not run (and paid for) again."""

    def __init__(self, offload: Offload) -> None:
        self.offload = offload

    async def receipt(self, tenant: str, task_id: str) -> Receipt | None:
        store = self.offload.deps.store
        return await asyncio.to_thread(store.receipt, Scope(tenant), task_id)

    async def _replayed(self, ctx: ExecutionContext) -> bool:
        receipt = await self.receipt(ctx.task.tenant, ctx.task.id)
        if receipt is not None and not receipt.authentic:
            raise ReceiptConflict(f"{ctx.task.type} {ctx.task.id}: its receipt does not verify")
        return receipt is not None

    async def l1(self, ctx: ExecutionContext) -> ExecResult:
        if await self._replayed(ctx):
            return ExecResult(changed=False, skipped=True)
        outcome = await self.offload.run_l1(*_where(ctx), ctx.attempt)
        return ExecResult(changed=bool(outcome.created), skipped=not outcome.claimed)

    async def l15(self, ctx: ExecutionContext) -> ExecResult:
        if await self._replayed(ctx):
            return ExecResult(changed=False, skipped=True)
        mark = mark_of(ctx.task.payload)
        outcome = await self.offload.run_l15(*_where(ctx), mark, ctx.attempt)
        return ExecResult(changed=not outcome.skipped, skipped=outcome.skipped)

    async def l2(self, ctx: ExecutionContext) -> ExecResult:
        if await self._replayed(ctx):
            return ExecResult(changed=False, skipped=True)
        outcome = await self.offload.run_l2(*_where(ctx), ctx.fence, ctx.attempt,
                                            ctx.task.payload)  # fmt: skip
        return ExecResult(changed=bool(outcome.mapped or outcome.orphaned))


def register_executors(registry: ExecutorRegistry, offload: Offload) -> None:
    """Register the three offload executors, and offload's backlog source, with the pipeline's
    registry."""
    if offload.deps.llm is not None:
        registry.add_usage_source(offload.deps.llm.usage.snapshot)
    if isinstance(offload.deps.llm, LLMClient):  # its dead letters heal when it answers
        registry.add_health(offload.deps.llm)
    store, diagrams = offload.deps.store, not offload.offline
    orphan_age_s = offload.deps.settings.orphan_max_age_s
    registry.add_backlog(lambda grace_s: offload_sources(store, grace_s, diagrams, orphan_age_s))
    executors = OffloadExecutors(offload)
    if registry.receipts is None:  # the layers' reader reads the same records
        registry.receipts = executors.receipt
    registry.register(OFFLOAD_L1, executors.l1)
    registry.register(OFFLOAD_L15, executors.l15)
    registry.register(OFFLOAD_L2, executors.l2, WhenBusy.SKIP)  # one run maps all
