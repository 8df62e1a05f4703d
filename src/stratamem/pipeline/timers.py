"""Lock keys, session timers and the timer pump, by the rules the task types declare
(`pipeline.task_type`); what a finished task sets in motion is its part's cascade, registered
with the executors (`ExecutorRegistry.add_cascade`)."""

from __future__ import annotations

from stratamem.clock import Clock
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.settings import LockScope
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import registered


def lock_key_for(task: Task, scope: LockScope) -> str | None:
    """The worker lock of `task`, by its type's rule (`TaskType.lock`); None: it runs without."""
    return task.type.lock_key(task.tenant, task.session, scope)


def session_timer_keys(tenant: str, session: str) -> list[str]:
    """The keys of every session timer the registered task types declare."""
    return [timer.key(tenant, session) for timer in registered().session_timers()]


async def clear_session_timers(backend: PipelineBackend, tenant: str, session: str) -> None:
    for key in session_timer_keys(tenant, session):
        await backend.remove_timer(key)


class TimerPump:
    """Turns due timers into tasks. Safe with any number of pumps: firing is atomic per timer."""

    def __init__(self, backend: PipelineBackend, clock: Clock, *, batch: int = 100) -> None:
        self._backend = backend
        self._clock = clock
        self._batch = batch

    async def run_once(self) -> list[Task]:
        """Fire every timer due now (in batches); returns the tasks enqueued."""
        fired: list[Task] = []
        while True:
            batch = await self._backend.fire_due_timers(now=self._clock.now(), limit=self._batch)
            fired.extend(batch)
            if len(batch) < self._batch:
                return fired
