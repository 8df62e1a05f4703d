"""Context offload's owed work as a backlog-scheduler source (`pipeline.scheduler`).

Per session, up to three keys: `l1:` pending tool pairs under no live claim (offload-l1),
`l15:` the oldest boundary waiting for its judgment (offload-l15 with its id), `l2:` entries
routed to a task and still unmapped to a diagram node (offload-l2; with an LLM only: offline
there are no diagrams). Each is due `grace_s` after it began waiting, so ingest's own tasks and
timers run it first; this finds what a lost queue, a dead letter requeued or purged, or a
skipped offload-l2 left behind. offload-l2 also gives entries older than the orphan age the
orphan node, so an entry is mapped even when the model never maps it.
"""

from __future__ import annotations

import asyncio

from stratamem.pipeline.scheduler import Cursor, Owed, Page
from stratamem.pipeline.task import Task, TaskType
from stratamem.store.offload.port import OffloadStore
from stratamem.store.offload.records import OffloadOwed

_PREFIX = {TaskType.OFFLOAD_L1: "l1", TaskType.OFFLOAD_L15: "l15", TaskType.OFFLOAD_L2: "l2"}


class OffloadSource:
    kind = "offload"

    def __init__(self, store: OffloadStore, grace_s: float, diagrams: bool) -> None:
        self.store, self.grace_s, self.diagrams = store, grace_s, diagrams

    async def page(self, after: Cursor | None, limit: int, now: float) -> Page:
        pair = None if after is None else (after[0], after[1])
        rows = await asyncio.to_thread(self.store.sessions_owing, pair, now, limit)
        items = [item for row in rows for item in self._owed(row)]
        last = (rows[-1].tenant, rows[-1].session) if rows else None
        return Page(items, last if len(rows) >= limit else None)

    def _owed(self, row: OffloadOwed) -> list[Owed]:
        tenant, session = row.tenant, row.session
        where, found = (tenant, session), []
        if row.pending_at is not None:
            found.append((Task(TaskType.OFFLOAD_L1, tenant, session), row.pending_at, ""))
        if row.unjudged_mark is not None and row.unjudged_at is not None:
            task = Task(TaskType.OFFLOAD_L15, tenant, session, {"mark": row.unjudged_mark})
            found.append((task, row.unjudged_at, row.unjudged_mark))
        if self.diagrams and row.unmapped_at is not None:
            found.append((Task(TaskType.OFFLOAD_L2, tenant, session), row.unmapped_at, ""))
        return [
            Owed(self._key(task), where, task, since + self.grace_s, f"{marker}@{since!r}")
            for task, since, marker in found
        ]

    @staticmethod
    def _key(task: Task) -> str:
        return f"{_PREFIX[task.type]}:{task.tenant}/{task.session}"

    def key_of(self, task: Task) -> str | None:
        return self._key(task) if task.type in _PREFIX else None
