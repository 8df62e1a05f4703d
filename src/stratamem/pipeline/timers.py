"""Timer keys, lock keys, the cascade between task types, and the timer pump.

Keys join identifiers with `/`, which `check_ident` never accepts inside a tenant or session, so
two different sessions can never share a lock, a timer or a state scope."""

from __future__ import annotations

from stratamem.clock import Clock
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult
from stratamem.pipeline.settings import LockScope, PipelineSettings
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


#: The session state's field: L1 (and flush) runs since the session's last L2.
SINCE_L2 = "l1_since_l2"


def session_scope(tenant: str, session: str) -> str:
    return f"{tenant}/{session}"


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


async def cascade(
    backend: PipelineBackend, settings: PipelineSettings, task: Task, result: ExecResult, now: float
) -> None:
    """What a finished task sets in motion (called while its lock is still held).

    L1 / flush done -> the session's count of L1s since its L2 grows, the L2 timer moved earlier
    (to now + l2_delay_s, or now after l2_batch L1s or a flush); L2 done -> L3 enqueued if it
    changed something, the L2 max-interval timer armed. An L2, done or skipped, drops the count
    (its absence is 0), so the state of a session lasts from an L1 to the next L2, not for as
    long as the pipeline runs. Anything else skipped cascades nothing.
    """
    if task.type is TaskType.L2 and task.session is not None:
        await backend.state_delete(session_scope(task.tenant, task.session), [SINCE_L2])
    if result.skipped:
        return
    if task.type is TaskType.L2 and result.changed:
        l3 = Task(TaskType.L3, task.tenant, None, {"session": task.session})
        await backend.enqueue(l3, now=now)
    if task.session is None:
        return
    scope = session_scope(task.tenant, task.session)
    if task.type in (TaskType.L1, TaskType.FLUSH):
        since_l2 = await backend.state_incr(scope, SINCE_L2)
        urgent = task.type is TaskType.FLUSH or since_l2 >= settings.l2_batch
        delay = 0.0 if urgent else settings.l2_delay_s
        l2 = Task(TaskType.L2, task.tenant, task.session)
        key = l2_timer_key(task.tenant, task.session)
        await backend.set_timer_if_earlier(key, l2, due_at=now + delay)
    elif task.type is TaskType.L2:
        l2 = Task(TaskType.L2, task.tenant, task.session)
        key = l2_max_timer_key(task.tenant, task.session)
        await backend.set_timer(key, l2, due_at=now + settings.l2_max_interval_s)


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
