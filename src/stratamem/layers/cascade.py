"""What a finished layer task sets in motion: the L1 → L2 → L3 cascade, registered with the
layers' executors (`ExecutorRegistry.add_cascade`); the worker runs it while the task's lock is
still held, after success (or a recovered receipt), never after a failure or a lost lock."""

from __future__ import annotations

from stratamem.layers.task_types import FLUSH, L1, L2, L2_MAX_TIMER, L2_TIMER, L3
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task

#: The session state's field: L1 (and flush) runs since the session's last L2.
SINCE_L2 = "l1_since_l2"


def session_scope(tenant: str, session: str) -> str:
    return f"{tenant}/{session}"


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
    if task.type is L2 and task.session is not None:
        await backend.state_delete(session_scope(task.tenant, task.session), [SINCE_L2])
    if result.skipped:
        return
    if task.type is L2 and result.changed:
        l3 = Task(L3, task.tenant, None, {"session": task.session})
        await backend.enqueue(l3, now=now)
    if task.session is None:
        return
    scope = session_scope(task.tenant, task.session)
    if task.type in (L1, FLUSH):
        since_l2 = await backend.state_incr(scope, SINCE_L2)
        urgent = task.type is FLUSH or since_l2 >= settings.l2_batch
        delay = 0.0 if urgent else settings.l2_delay_s
        l2 = Task(L2, task.tenant, task.session)
        key = L2_TIMER.key(task.tenant, task.session)
        await backend.set_timer_if_earlier(key, l2, due_at=now + delay)
    elif task.type is L2:
        l2 = Task(L2, task.tenant, task.session)
        key = L2_MAX_TIMER.key(task.tenant, task.session)
        await backend.set_timer(key, l2, due_at=now + settings.l2_max_interval_s)
