"""The offload stages on the pipeline: executors for offload-l1/-l15/-l2 and the scheduler port.

    registry = ExecutorRegistry()
    offload = Offload(store, PipelineScheduler(backend, clock), llm=llm, clock=clock)
    register_executors(registry, offload)
    Worker(backend, registry, settings, clock=clock)

offload-l1 and offload-l15 run without a lock; offload-l2 runs under the session's diagram lock
and writes its diagrams under the lock's fencing token.
"""

from __future__ import annotations

from stratamem.clock import Clock
from stratamem.offload.facade import Offload, mark_of
from stratamem.offload.schedule import Stage, StageTask
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry
from stratamem.pipeline.task import Task, TaskType
from stratamem.store.base import Fence

_TYPES = {
    Stage.L1: TaskType.OFFLOAD_L1,
    Stage.L15: TaskType.OFFLOAD_L15,
    Stage.L2: TaskType.OFFLOAD_L2,
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


def _fence(ctx: ExecutionContext) -> Fence | None:
    if ctx.lock_key is None or ctx.fence_token is None:
        return None
    return Fence(ctx.lock_key, ctx.fence_token)


def _where(ctx: ExecutionContext) -> tuple[str, str]:
    return ctx.task.tenant, ctx.task.session or ""


def register_executors(registry: ExecutorRegistry, offload: Offload) -> None:
    """Register the three offload executors with the pipeline's registry."""

    async def offload_l1(ctx: ExecutionContext) -> ExecResult:
        outcome = await offload.run_l1(*_where(ctx))
        return ExecResult(changed=bool(outcome.created), skipped=not outcome.claimed)

    async def offload_l15(ctx: ExecutionContext) -> ExecResult:
        outcome = await offload.run_l15(*_where(ctx), mark_of(ctx.task.payload))
        return ExecResult(changed=not outcome.skipped, skipped=outcome.skipped)

    async def offload_l2(ctx: ExecutionContext) -> ExecResult:
        outcome = await offload.run_l2(*_where(ctx), _fence(ctx))
        return ExecResult(changed=bool(outcome.mapped or outcome.orphaned))

    registry.register(TaskType.OFFLOAD_L1, offload_l1)
    registry.register(TaskType.OFFLOAD_L15, offload_l15)
    registry.register(TaskType.OFFLOAD_L2, offload_l2)
