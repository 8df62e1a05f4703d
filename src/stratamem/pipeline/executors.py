"""The executor contract: how the memory layers plug their work into the worker.

An executor is an async callable `executor(ctx) -> ExecResult`, registered for one `TaskType` in
an `ExecutorRegistry`. The worker calls it once per delivery, with:

- `ctx.task`: type, tenant, session (None for tenant-wide L3), payload dict, attempt (0 first);
- `ctx.lock_key`, `ctx.fence_token` and `ctx.fence_owner`: the worker lock held while the
  executor runs, its fencing token and the grant's owner (all None for the lockless types
  offload-l1 and offload-l15). Every write the executor makes to the system of record for this
  key should be conditional on the token and owner (see
  `stratamem.pipeline.fencing.fence_check`): a stale token means another worker took over (or
  the backend granted the same token twice), and the store raises `StaleFencingToken`; let it
  propagate, the worker then aborts or puts the task back, without ack;
- `ctx.enqueue_after_release(task)`: tasks to enqueue only after the lock is released (so a
  follow-up on the same key does not meet our own lock); enqueued only if the executor succeeds;
- `ctx.clock` (injected time), `ctx.enqueued_at` (when the task was enqueued);
- `ctx.attempt`: this execution (task id, attempt, delivery count, fencing token, worker, start
  time). An executor that writes commits a completion receipt carrying it with its effects
  (`stratamem.store.evidence.receipts`), so a recovering worker can tell finished work from
  lost work. With an execution log (`ExecutorRegistry.executions`), the worker records the
  execution's start before it calls the executor and its end when it returns
  (`stratamem.store.evidence.executions`).

To choose the retry time itself (a rate limit's Retry-After), the executor raises
`stratamem.pipeline.errors.RetryLater(delay_s)`; it still counts against the retry limit.

The executor may be cancelled at any await (lock lost, or shutdown past the grace period): it
must keep its writes transactional. Any exception other than `StaleFencingToken` / `LockLost`
counts as a failure: the task is retried with backoff, then dead-lettered with the error text.

The result drives the cascade: `skipped=True` means nothing was done (no cascade at all);
`changed=False` means the work ran but changed nothing (an L2 that changed nothing enqueues no L3).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from stratamem.clock import Clock
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.errors import UnknownTaskType
from stratamem.pipeline.retention import RetainedLog
from stratamem.pipeline.scheduler import SchedulerLoop, Source, backlog_loop
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import TaskType, registered
from stratamem.store.core.port import Fence
from stratamem.store.evidence.executions import ExecutionStart
from stratamem.store.evidence.receipts import Attempt, Receipt


class WhenBusy(StrEnum):
    """What the worker does with a task whose lock is held elsewhere (set per task type by the
    part that registers its executor, `ExecutorRegistry.register`)."""

    WAIT = "wait"
    """Wait for the lock (with backoff, up to `lock_wait_s`), then drop the task: its work stays
    owed in the store, where the backlog scheduler finds it again."""
    SKIP = "skip"
    """Skip it at once: the run that holds the lock covers its work."""


@dataclass(frozen=True)
class ExecResult:
    changed: bool = True
    skipped: bool = False


@dataclass
class ExecutionContext:
    task: Task
    lock_key: str | None
    fence_token: int | None
    clock: Clock
    enqueued_at: float
    after_release: list[Task] = field(default_factory=list)
    attempt: Attempt | None = None
    fence_owner: str | None = None
    """The lock grant's owner: a fenced write carries it with `fence_token`, so the store
    refuses the same token from another holder (`store.fencing`)."""

    @property
    def fence(self) -> Fence | None:
        """The fence of this execution's writes (None for the lockless types)."""
        if self.lock_key is None or self.fence_token is None:
            return None
        return Fence(self.lock_key, self.fence_token, self.fence_owner)

    def enqueue_after_release(self, task: Task) -> None:
        """Enqueue `task` once this execution succeeded and its lock was released."""
        self.after_release.append(task)


class Executor(Protocol):
    async def __call__(self, ctx: ExecutionContext, /) -> ExecResult: ...


class ExecutionLog(Protocol):
    """Where the worker records each execution (`stratamem.store.evidence.executions`)."""

    async def started(self, tenant: str, start: ExecutionStart, clock: Clock) -> Attempt:
        """Record the start (time read from `clock` when recorded): the execution's `Attempt`;
        `StaleFencingToken` if a newer token of its lock started (then it must not run)."""

    async def ended(self, tenant: str, attempt: Attempt, outcome: str, clock: Clock) -> None:
        """Record the end of `attempt`'s execution with `outcome`."""


UsageSource = Callable[[], Mapping[str, Mapping[str, int]]]
#: Reads the receipt of a task id in a tenant (None: no receipt). Raises when it cannot tell.
ReceiptReader = Callable[[str, str], Awaitable[Receipt | None]]
#: Makes the backlog sources of a part, given the scheduler's grace period in seconds.
BacklogFactory = Callable[[float], Sequence[Source]]
#: What a finished task sets in motion (backend, settings, the task, its result, now), run by the
#: worker while the task's lock is still held; a part registers its own (`layers.cascade`).
Cascade = Callable[[PipelineBackend, PipelineSettings, Task, ExecResult, float], Awaitable[None]]


class ServiceHealth(Protocol):
    """A service the executors call (an LLM endpoint's client), as the worker sees it: a task
    dead-lettered because the service was in trouble is requeued once it answers again."""

    def answered_at(self) -> float | None:
        """When the service last answered a call (None: not yet)."""

    def explains(self, error: str) -> bool:
        """Whether a dead letter's error is this service's trouble (down, timing out, 5xx, rate
        limited), which ends when it answers again."""


class ExecutorRegistry:
    """Task type -> executor. Other parts register theirs at start-up."""

    def __init__(self, executors: Iterable[tuple[TaskType, Executor]] = ()) -> None:
        self._executors: dict[TaskType, Executor] = {}
        self._when_busy: dict[TaskType, WhenBusy] = {}
        self._usage_sources: list[UsageSource] = []
        #: Reads completion receipts from the store the executors write to (set by whoever
        #: registers them); the worker's reclaim path acknowledges finished work with it.
        self.receipts: ReceiptReader | None = None
        #: Records each execution's start and end in the same store (set with `receipts`);
        #: without one, executions are stamped on the delivery only.
        self.executions: ExecutionLog | None = None
        #: The log and receipts to prune (`pipeline.retention`; set with `executions`).
        self.retained: RetainedLog | None = None
        self._backlog: list[BacklogFactory] = []
        self._cascades: list[Cascade] = []
        self._health: list[ServiceHealth] = []
        for task_type, executor in executors:
            self.register(task_type, executor)

    def add_usage_source(self, source: UsageSource) -> None:
        """A function giving `{stage: {counter: n}}` (an LLM client's token usage per stage);
        the worker publishes the sum of all sources with its metrics."""
        self._usage_sources.append(source)

    def add_backlog(self, factory: BacklogFactory) -> None:
        """The sources of owed work of the part whose executors these are: the backlog
        scheduler beside these executors finds that work in the store (`pipeline.scheduler`)."""
        self._backlog.append(factory)

    def add_health(self, health: ServiceHealth) -> None:
        """A service the executors call, whose trouble a dead letter may name (`ServiceHealth`)."""
        if all(known is not health for known in self._health):
            self._health.append(health)

    def answered_at(self) -> float | None:
        """When any of the services last answered (None: none has, or none is registered)."""
        times = [t for t in (h.answered_at() for h in self._health) if t is not None]
        return max(times, default=None)

    def healed(self, error: str, failed_at: float) -> bool:
        """Whether a dead letter that failed at `failed_at` with `error` names the trouble of a
        service that has answered since."""
        for health in self._health:
            answered = health.answered_at()
            if answered is not None and answered > failed_at and health.explains(error):
                return True
        return False

    def add_cascade(self, cascade: Cascade) -> None:
        """What the part's finished tasks set in motion (`Cascade`)."""
        self._cascades.append(cascade)

    async def cascade(
        self,
        backend: PipelineBackend,
        settings: PipelineSettings,
        task: Task,
        result: ExecResult,
        now: float,
    ) -> None:
        """Run every registered cascade for a task that finished with `result`."""
        for cascade in self._cascades:
            await cascade(backend, settings, task, result, now)

    def backlog_sources(self, grace_s: float) -> list[Source]:
        return [source for factory in self._backlog for source in factory(grace_s)]

    def scheduler_loop(
        self, backend: PipelineBackend, settings: PipelineSettings, clock: Clock, owner: str
    ) -> SchedulerLoop | None:
        """The scheduler loop over these backlog sources, pruning `retained`
        (`pipeline.scheduler.backlog_loop`): the one every process that schedules runs."""
        sources = self.backlog_sources(settings.scheduler_grace_s)
        return backlog_loop(backend, sources, settings, clock, owner, self.retained)

    def usage(self) -> dict[str, dict[str, int]]:
        """The usage of every source, summed per stage and counter."""
        total: dict[str, dict[str, int]] = {}
        for source in self._usage_sources:
            for stage, counters in source().items():
                into = total.setdefault(stage, {})
                for name, value in counters.items():
                    into[name] = into.get(name, 0) + value
        return total

    def register(
        self, task_type: TaskType | str, executor: Executor, when_busy: WhenBusy = WhenBusy.WAIT
    ) -> None:
        """`executor` runs the tasks of `task_type`; `when_busy` says what a task whose lock is
        held elsewhere waits for (the part that owns the type knows)."""
        declared = registered().get(task_type)
        self._executors[declared] = executor
        self._when_busy[declared] = when_busy

    def when_busy(self, task_type: TaskType) -> WhenBusy:
        return self._when_busy.get(task_type, WhenBusy.WAIT)

    def get(self, task_type: TaskType) -> Executor:
        try:
            return self._executors[task_type]
        except KeyError:
            raise UnknownTaskType(f"no executor registered for task type {task_type}") from None

    def types(self) -> list[TaskType]:
        return sorted(self._executors)


async def noop_executor(ctx: ExecutionContext) -> ExecResult:
    """Does nothing; for benchmarks and smoke runs."""
    return ExecResult(changed=False)


def noop_registry() -> ExecutorRegistry:
    return ExecutorRegistry((t, noop_executor) for t in registered())
