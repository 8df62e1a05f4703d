"""Timer keys, lock keys and the timer pump (the cascade between the layers' task types is
the layers', `layers.cascade`, registered with the executors).

Keys join identifiers with `/`, which `check_ident` never accepts inside a tenant or session, so
two different sessions can never share a lock, a timer or a state scope."""

from __future__ import annotations

from stratamem.clock import Clock
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.settings import LockScope
from stratamem.pipeline.task import Task, TaskType

SESSION_LOCKED = frozenset({TaskType.L1, TaskType.FLUSH})
LOCKLESS = frozenset({TaskType.OFFLOAD_L1, TaskType.OFFLOAD_L15})


def lock_key_for(task: Task, scope: LockScope) -> str | None:
    """The worker lock of `task`: per session for L1 / flush (per tenant with
    `LockScope.TENANT`), per tenant for L2 (it consolidates the tenant's memories, whichever
    session asked: two sessions' L2 queue behind one lock and the second finds nothing left to
    pay for) and L3, per session task diagram for offload-l2, none for offload-l1 / -l15."""
    if task.type in LOCKLESS:
        return None
    if task.type is TaskType.OFFLOAD_L2:
        return f"diagram/{task.tenant}/{task.session}"
    if task.type is TaskType.L2 and scope is LockScope.SESSION:
        return f"l2/{task.tenant}"
    if task.type in SESSION_LOCKED and scope is LockScope.SESSION:
        return f"session/{task.tenant}/{task.session}"
    return f"tenant/{task.tenant}"


def l2_timer_key(tenant: str, session: str) -> str:
    return f"l2/{tenant}/{session}"


def l2_max_timer_key(tenant: str, session: str) -> str:
    return f"l2max/{tenant}/{session}"


def offload_l2_timer_key(tenant: str, session: str) -> str:
    return f"offload-l2/{tenant}/{session}"


def session_timer_keys(tenant: str, session: str) -> list[str]:
    return [
        l2_timer_key(tenant, session),
        l2_max_timer_key(tenant, session),
        offload_l2_timer_key(tenant, session),
    ]


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
