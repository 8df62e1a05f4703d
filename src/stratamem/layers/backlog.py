"""The memory layers' owed work as backlog-scheduler sources (`pipeline.scheduler`).

- `L1`: sessions with turns past their cursor, any age (imported history included); due when
  the warm-up threshold of new turns is reached, or `idle_timeout_s` after the last turn.
- `L2`: tenants with memories written after their L2 mark, due `catch_up_quiet_s` (at least
  `grace_s`) after the newest one and no sooner than `l2_min_interval_s` after the last L2
  (the cascade's timer runs it sooner when enough changed; this finds what a lost timer or
  queue left behind, and the changes too few for a session's L2).
- `L3`: tenants whose scenes changed after their last L3 read them (or with
  `l3_every_memories` memories since), due `catch_up_quiet_s` (at least `grace_s`) after the
  change.
- `flush`: flush requests accepted and not completed, due `grace_s` after the request.
- `L2-stale`, `L3-stale`: tenants with scenes (L2) or a profile (L3) built from a memory
  since corrected, superseded or forgotten (`store/lineage`), due `grace_s` after the
  marking; the stage writes them again and clears the marks.
- `L1-retry`: quarantined turns whose automatic retry is scheduled (`Failure.retry_at`), due
  then: an `L1` task of the turn's session with `{"retry": <failure id>}` (under the session's
  lock, like any L1).

Progress markers: the L1 cursor, the L2 mark, the time of the last L3, the request's time, the
retry's count and time.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from stratamem.layers import scheduling
from stratamem.layers.settings import LayerSettings
from stratamem.layers.task_types import FLUSH, L1, L2, L3
from stratamem.pipeline.scheduler import Cursor, Owed, Page, Source
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import TaskType
from stratamem.store.backlog import BacklogStore, FlushRequest, TenantOwed
from stratamem.store.failures.records import Failure


def _pair(after: Cursor | None) -> tuple[str, str] | None:
    return None if after is None else (after[0], after[1])


def _single(after: Cursor | None) -> str | None:
    return None if after is None else after[0]


def _session_key(task: Task, kind: TaskType) -> str | None:
    return f"{task.tenant}/{task.session}" if task.type is kind else None


def _end(rows: int, limit: int, last: Cursor | None) -> Cursor | None:
    return last if rows >= limit else None


class _NoFallback:
    def when_parked(self, owed: Owed, now: float) -> Owed | None:
        """A parked layer key waits for its operator: nothing else to submit."""
        return None


class L1Source(_NoFallback):
    kind, task_type = L1.name, L1

    def __init__(self, backlog: BacklogStore, settings: LayerSettings) -> None:
        self.backlog, self.settings = backlog, settings

    async def page(self, after: Cursor | None, limit: int, now: float) -> Page:
        rows = await asyncio.to_thread(self.backlog.sessions_owing_l1, _pair(after), limit)
        items = []
        for state in rows:
            trigger, due_at = scheduling.l1_due(state, self.settings)
            task = Task(L1, state.tenant, state.session, {"trigger": trigger.value})
            items.append(Owed(f"{state.tenant}/{state.session}", (state.tenant, state.session),
                              task, due_at, str(state.cursor_seq)))  # fmt: skip
        return Page(items, _end(len(rows), limit, items[-1].cursor if items else None))

    def key_of(self, task: Task) -> str | None:
        return _session_key(task, L1)


class FlushSource(_NoFallback):
    kind, task_type = FLUSH.name, FLUSH

    def __init__(self, backlog: BacklogStore, grace_s: float) -> None:
        self.backlog, self.grace_s = backlog, grace_s

    async def page(self, after: Cursor | None, limit: int, now: float) -> Page:
        rows = await asyncio.to_thread(self.backlog.flush_requests, _pair(after), limit)
        items = [self._owed(r) for r in rows]
        return Page(items, _end(len(rows), limit, items[-1].cursor if items else None))

    def _owed(self, request: FlushRequest) -> Owed:
        tenant, session = request.tenant, request.session
        task = Task(FLUSH, tenant, session, {"reason": "backlog"})
        due_at = request.requested_at + self.grace_s
        return Owed(f"{tenant}/{session}", (tenant, session), task, due_at,
                    repr(request.requested_at))  # fmt: skip

    def key_of(self, task: Task) -> str | None:
        return _session_key(task, FLUSH)


class RetrySource(_NoFallback):
    """Quarantined turns due for their automatic retry (`LayerService.auto_retry`)."""

    kind, task_type = "L1-retry", L1

    def __init__(self, backlog: BacklogStore) -> None:
        self.backlog = backlog

    async def page(self, after: Cursor | None, limit: int, now: float) -> Page:
        rows = await asyncio.to_thread(self.backlog.retries_scheduled, _pair(after), limit)
        items = [self._owed(f) for f in rows if f.session is not None and f.retry_at is not None]
        last = (rows[-1].tenant, rows[-1].id) if rows else None
        return Page(items, _end(len(rows), limit, last))

    def _owed(self, failure: Failure) -> Owed:
        task = Task(L1, failure.tenant, failure.session, {"retry": failure.id})
        progress = f"{failure.auto_retries}@{failure.retry_at}"
        return Owed(f"{failure.tenant}/{failure.id}", (failure.tenant, failure.id), task,
                    failure.retry_at or 0.0, progress)  # fmt: skip

    def key_of(self, task: Task) -> str | None:
        retry = task.payload.get("retry") if task.type is L1 else None
        return f"{task.tenant}/{retry}" if isinstance(retry, str) else None


class _TenantSource(_NoFallback):
    task_type: TaskType

    def __init__(self, backlog: BacklogStore, settings: LayerSettings, grace_s: float) -> None:
        self.backlog, self.settings, self.grace_s = backlog, settings, grace_s
        self.kind = self.task_type.name

    def _rows(self, after: str | None, limit: int) -> list[TenantOwed]:
        raise NotImplementedError

    async def page(self, after: Cursor | None, limit: int, now: float) -> Page:
        rows = await asyncio.to_thread(self._rows, _single(after), limit)
        items = [self._owed(r) for r in rows]
        return Page(items, _end(len(rows), limit, items[-1].cursor if items else None))

    def _owed(self, row: TenantOwed) -> Owed:
        task = Task(self.task_type, row.tenant, None, {"reason": "backlog"})
        due_at = max((row.changed_at or 0.0) + self.grace_s, self._earliest(row))
        return Owed(row.tenant, (row.tenant,), task, due_at, repr(row.mark))

    def _earliest(self, row: TenantOwed) -> float:
        return float("-inf")

    def key_of(self, task: Task) -> str | None:
        return task.tenant if task.type is self.task_type else None


class L2Source(_TenantSource):
    """L2 consolidates a tenant's changed memories (whichever session they came from), so it is
    owed, submitted and locked per tenant."""

    task_type = L2

    def _rows(self, after: str | None, limit: int) -> list[TenantOwed]:
        return self.backlog.tenants_owing_l2(after, limit)

    def _earliest(self, row: TenantOwed) -> float:
        """Once the tenant is quiet, no memory written and no turn said (changes too few for a
        session's L2 wait for it, `scheduling.l2_worth_running`), and `l2_min_interval_s`
        after its last L2."""
        active = max(row.changed_at or 0.0, row.last_turn_at or 0.0)
        quiet = active + self.settings.catch_up_quiet_s
        if row.last_run_at is None:
            return quiet
        return max(quiet, row.last_run_at + self.settings.l2_min_interval_s)


class L3Source(_TenantSource):
    task_type = L3

    def _rows(self, after: str | None, limit: int) -> list[TenantOwed]:
        return self.backlog.tenants_owing_l3(after, self.settings.l3_every_memories, limit)

    def _earliest(self, row: TenantOwed) -> float:
        """Once the scenes are quiet (`scheduling.l3_worth_running`)."""
        return (row.changed_at or 0.0) + self.settings.catch_up_quiet_s


class StaleScenesSource(_TenantSource):
    """Scenes built from a corrected or forgotten memory: an L2 writes them again."""

    task_type = L2
    record_kind = "scene"

    def __init__(self, backlog: BacklogStore, settings: LayerSettings, grace_s: float) -> None:
        super().__init__(backlog, settings, grace_s)
        self.kind = f"{self.task_type.name}-stale"

    def _rows(self, after: str | None, limit: int) -> list[TenantOwed]:
        return self.backlog.tenants_stale(self.record_kind, after, limit)

    def _owed(self, row: TenantOwed) -> Owed:
        owed = super()._owed(row)
        return replace(owed, task=Task(self.task_type, row.tenant, None, {"reason": "stale"}))


class StaleProfileSource(StaleScenesSource):
    """A profile built from a corrected or forgotten memory: an L3 writes it again."""

    task_type = L3
    record_kind = "profile"


def layer_sources(backlog: BacklogStore, settings: LayerSettings, grace_s: float) -> list[Source]:
    """The layer sources, for a scheduler beside workers running the layer executors."""
    return [L1Source(backlog, settings), L2Source(backlog, settings, grace_s),
            L3Source(backlog, settings, grace_s), FlushSource(backlog, grace_s),
            StaleScenesSource(backlog, settings, grace_s),
            StaleProfileSource(backlog, settings, grace_s), RetrySource(backlog)]  # fmt: skip
