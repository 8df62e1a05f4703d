"""Retention of the execution log and receipts: the pass that prunes them, run by the scheduler's
loop (`pipeline.scheduler.SchedulerLoop`) under its lease, so by one process of the deployment
at a time, every `log_prune_interval_s`.

A pass deletes the ended executions and the receipts older than `log_retention_s` (0: never)
that nothing needs any more (the rule: `stratamem.store.log_retention`). The pipeline's part of
that rule is which tasks it still holds, read at the start of the pass: queued or in flight
(`list_tasks`), dead-lettered (`list_dead`: an operator may requeue it, under the same id), or
waiting for a retry (its `retry/<id>` timer, looked up for each row past the retention). When
more than `log_prune_scan` tasks are queued or dead, the pass cannot tell and deletes nothing.

Each table gets at most `log_prune_batches` batches of `log_prune_batch` rows a pass: a read
and one short write transaction each, so a backlog of any size is worked off over passes
without holding the store's write lock for long. Counts are published with the scheduler's
snapshot (`pipeline status`, `GET /v1/pipeline`, `/metrics`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from stratamem.pipeline.backend import PipelineBackend, retry_timer_key_for
from stratamem.pipeline.settings import PipelineSettings
from stratamem.store.log_retention import LogPage, LogRow, LogTable, task_ids

log = logging.getLogger(__name__)


class RetainedLog(Protocol):
    """The store side (`stratamem.store.log_retention.ThreadedRetainedLog`)."""

    async def page(
        self, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
    ) -> LogPage: ...

    async def prune(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int: ...


@dataclass(slots=True)
class RetentionCounters:
    """Totals since the process started its pruner (`last_at`: its last pass)."""

    passes: int = 0
    undecided: int = 0  # passes that deleted nothing: too many queued or dead tasks to tell
    errors: int = 0
    executions: int = 0
    receipts: int = 0
    held: int = 0  # rows past the retention the last pass kept: their task is still held
    last_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class PruneReport:
    deleted: dict[str, int] = field(default_factory=dict)
    held: int = 0
    decided: bool = True


class HeldTasks:
    """The task ids the pipeline still holds (see the module doc), read once per pass."""

    def __init__(self, backend: PipelineBackend, ids: set[str]) -> None:
        self._backend = backend
        self._ids = ids
        self._timers: dict[str, bool] = {}

    @classmethod
    async def read(cls, backend: PipelineBackend, scan: int) -> HeldTasks | None:
        """None when more than `scan` tasks are queued or dead: then nobody can tell."""
        queued = await backend.list_tasks(limit=scan + 1)
        dead = await backend.list_dead(limit=scan + 1)
        if len(queued) > scan or len(dead) > scan:
            return None
        return cls(backend, {t.id for t in queued} | {d.task.id for d in dead})

    async def holds(self, row_task_id: str) -> bool:
        for task_id in task_ids(row_task_id):
            if task_id in self._ids or await self._retrying(task_id):
                return True
        return False

    async def _retrying(self, task_id: str) -> bool:
        found = self._timers.get(task_id)
        if found is None:
            timer = await self._backend.get_timer(retry_timer_key_for(task_id))
            found = self._timers[task_id] = timer is not None
        return found


class LogPruner:
    """Runs a pass every `log_prune_interval_s` (see the module doc) and keeps the counts."""

    def __init__(
        self, backend: PipelineBackend, retained: RetainedLog, settings: PipelineSettings
    ) -> None:
        self.backend = backend
        self.retained = retained
        self.settings = settings
        self.counters = RetentionCounters()

    async def maybe_run(self, now: float) -> PruneReport | None:
        """A pass if one is due (None: retention is off, or the last pass was too recent)."""
        last = self.counters.last_at
        if self.settings.log_retention_s == 0:
            return None
        if last is not None and now - last < self.settings.log_prune_interval_s:
            return None
        return await self.run(now)

    async def run(self, now: float) -> PruneReport:
        """One pass; the store's and the backend's errors propagate (the loop counts them)."""
        self.counters.passes += 1
        self.counters.last_at = now
        report = PruneReport()
        held = await HeldTasks.read(self.backend, self.settings.log_prune_scan)
        if held is None:
            log.warning("retention: more than %d tasks are queued or dead; nothing pruned",
                        self.settings.log_prune_scan)  # fmt: skip
            self.counters.undecided += 1
            report.decided = False
            return report
        before = now - self.settings.log_retention_s
        for table in LogTable:
            report.deleted[table.value] = await self._prune(table, before, held, report)
        self.counters.executions += report.deleted[LogTable.EXECUTIONS.value]
        self.counters.receipts += report.deleted[LogTable.RECEIPTS.value]
        self.counters.held = report.held
        return report

    async def _prune(
        self, table: LogTable, before: float, held: HeldTasks, report: PruneReport
    ) -> int:
        """Up to `log_prune_batches` batches of `table`, oldest first."""
        deleted, after = 0, None
        for _ in range(self.settings.log_prune_batches):
            page = await self.retained.page(table, before, after, self.settings.log_prune_batch)
            gone = [row for row in page.rows if not await held.holds(row.task_id)]
            report.held += len(page.rows) - len(gone)
            if gone:
                deleted += await self.retained.prune(table, gone, before)
            if page.next_after is None:
                break
            after = page.next_after
        return deleted
