"""Context offload's owed work as backlog-scheduler sources (`pipeline.scheduler`), one per
stage, so each has its own lease and budget:

- `offload-l1`: sessions with pending tool pairs under no live claim;
- `offload-l15`: sessions whose oldest boundary waits for its judgment (the task names it);
- `offload-l2`: sessions with entries routed to a task and still unmapped to a diagram node
  (with an LLM only: offline there are no diagrams, and no such source, so the scan never
  reads those rows).

Each key is due `grace_s` after it began waiting, so ingest's own tasks and timers run it first;
this finds what a lost queue, a dead letter requeued or purged, or a skipped offload-l2 left
behind. offload-l2 also gives entries older than the orphan age the orphan node, so an entry is
mapped even when the model never maps it; while a session's offload-l2 is a dead letter (its
key parked), that fallback alone is still submitted (`{"orphans": true}`, no LLM call), once its
oldest unmapped entry is past the orphan age.
"""

from __future__ import annotations

import asyncio

from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2, OFFLOAD_L15
from stratamem.pipeline.scheduler import Cursor, Owed, Page, Source
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import task_type
from stratamem.store.offload.port import OffloadStore
from stratamem.store.offload.records import OffloadOwed, OffloadStage

_PREFIX = {OFFLOAD_L1: "l1", OFFLOAD_L15: "l15", OFFLOAD_L2: "l2"}


ORPHANS = "orphans"
"""The payload flag of an offload-l2 task that only maps old entries to the orphan node."""


class OffloadSource:
    """The owed work of one offload stage."""

    def __init__(
        self,
        store: OffloadStore,
        grace_s: float,
        stage: OffloadStage,
        orphan_age_s: float = float("inf"),
    ) -> None:
        self.store, self.grace_s, self.stage = store, grace_s, stage
        self.orphan_age_s = orphan_age_s
        self.task_type = task_type(stage.value)
        self.kind = self.task_type.name

    async def page(self, after: Cursor | None, limit: int, now: float) -> Page:
        pair = None if after is None else (after[0], after[1])
        rows = await asyncio.to_thread(self.store.sessions_owing, pair, now, limit, [self.stage])
        items = [item for row in rows for item in self._owed(row)]
        last = (rows[-1].tenant, rows[-1].session) if rows else None
        return Page(items, last if len(rows) >= limit else None)

    def _owed(self, row: OffloadOwed) -> list[Owed]:
        tenant, session = row.tenant, row.session
        found = None
        if self.stage is OffloadStage.L1 and row.pending_at is not None:
            found = (Task(OFFLOAD_L1, tenant, session), row.pending_at, "")
        elif self.stage is OffloadStage.L15 and row.unjudged_mark is not None:
            task = Task(OFFLOAD_L15, tenant, session, {"mark": row.unjudged_mark})
            found = (task, row.unjudged_at or 0.0, row.unjudged_mark)
        elif self.stage is OffloadStage.L2 and row.unmapped_at is not None:
            found = (Task(OFFLOAD_L2, tenant, session), row.unmapped_at, "")
        if found is None:
            return []
        task, since, marker = found
        return [Owed(self._key(task), (tenant, session), task, since + self.grace_s,
                     f"{marker}@{since!r}")]  # fmt: skip

    def when_parked(self, owed: Owed, now: float) -> Owed | None:
        """offload-l2's orphan fallback (under a key of its own), due once the session's
        oldest unmapped entry is past the orphan age."""
        if self.stage is not OffloadStage.L2:
            return None
        task = owed.task
        orphans = Task(OFFLOAD_L2, task.tenant, task.session, {ORPHANS: True})
        since = owed.due_at - self.grace_s
        return Owed(f"orphans:{owed.key}", owed.cursor, orphans, since + self.orphan_age_s,
                    owed.progress)  # fmt: skip

    @staticmethod
    def _key(task: Task) -> str:
        return f"{_PREFIX[task.type]}:{task.tenant}/{task.session}"

    def key_of(self, task: Task) -> str | None:
        return self._key(task) if task.type is self.task_type else None


def offload_sources(
    store: OffloadStore, grace_s: float, diagrams: bool, orphan_age_s: float = float("inf")
) -> list[Source]:
    """A source per offload stage (offload-l2 only with `diagrams`: an LLM to draw them)."""
    stages = [OffloadStage.L1, OffloadStage.L15] + ([OffloadStage.L2] if diagrams else [])
    return [OffloadSource(store, grace_s, stage, orphan_age_s) for stage in stages]
