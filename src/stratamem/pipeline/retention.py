"""Retention of the execution log and receipts: the pass that prunes them, run by the scheduler's
loop (`pipeline.scheduler.SchedulerLoop`) under its lease, so by one process of the deployment
at a time, every `log_prune_interval_s`.

A pass deletes the ended executions and the receipts older than `log_retention_s` (0: never)
that nothing needs any more (the rule: `stratamem.store.evidence.retention`). The pipeline's part of
that rule is which tasks it still holds: queued or in flight (`list_tasks`), waiting for a
retry (its `retry/<id>` timer), dead-lettered (`list_dead`: an operator may requeue it, under
the same id). They are read for each batch, after its page and just before its delete, for the
batch's tasks only: a task moves between those states under one id while a pass runs (a retry
timer fires into the queue, a dead letter is requeued), so holds read once at the start of the
pass would miss it (`tests/pipeline/test_retention.py` drives both).

Why that holds at delete time: a task with a receipt was enqueued before it (executions run
delivered tasks), every move between held states is atomic on both backends, and a task that
left them (acknowledged, purged) never comes back under its id; so a task held when the batch
is deleted was held all through the batch's reads, and is seen unless it moved twice while
they ran. The reads go queue, timers, dead letters, queue again, so that each single move is
seen (from the queue to a timer or the dead letters: the first queue read or a later read of
where it went; back to the queue: the last read). When more than `log_prune_scan` tasks are
queued or dead, nobody can tell: the pass stops there.

Then the keys that signed receipts go once retired more than `log_retention_s` ago and named by
no receipt left (`store.evidence.retention`): never the active key, nor one a kept receipt names.

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
from stratamem.store.evidence.retention import LogPage, LogRow, LogTable, task_ids

log = logging.getLogger(__name__)


class RetainedLog(Protocol):
    """The store side (`stratamem.store.evidence.retention.ThreadedRetainedLog`)."""

    async def page(
        self, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
    ) -> LogPage: ...

    async def prune(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int: ...

    async def prune_keys(self, before: float) -> int: ...


@dataclass(slots=True)
class RetentionCounters:
    """Totals since the process started its pruner (`last_at`: its last pass, or, until its
    first, the deployment's last one when it took the scheduler's lease over)."""

    passes: int = 0
    undecided: int = 0  # passes that deleted nothing: too many queued or dead tasks to tell
    errors: int = 0
    executions: int = 0
    receipts: int = 0
    keys: int = 0  # receipt keys: retired before the retention and named by no receipt
    held: int = 0  # rows past the retention the last pass kept: their task is still held
    last_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class PruneReport:
    deleted: dict[str, int] = field(default_factory=dict)
    keys: int = 0
    held: int = 0
    decided: bool = True


class HeldTasks:
    """Which of a batch's tasks the pipeline holds (see the module doc), read just before the
    batch is deleted."""

    def __init__(self, ids: set[str]) -> None:
        self._ids = ids

    @classmethod
    async def read(
        cls, backend: PipelineBackend, candidates: set[str], scan: int
    ) -> HeldTasks | None:
        """The held among `candidates`: the queue, the retry timer of each candidate not in it,
        the dead letters, the queue again, in that order (see the module doc). None when more
        than `scan` tasks are queued or dead: then nobody can tell."""
        queued = await _queued(backend, scan)
        if queued is None:
            return None
        held = queued & candidates
        for task_id in sorted(candidates - held):
            if await backend.get_timer(retry_timer_key_for(task_id)) is not None:
                held.add(task_id)
        dead = await backend.list_dead(limit=scan + 1)
        again = await _queued(backend, scan)
        if len(dead) > scan or again is None:
            return None
        return cls(held | ({d.task.id for d in dead} | again) & candidates)

    def holds(self, row_task_id: str) -> bool:
        return any(task_id in self._ids for task_id in task_ids(row_task_id))


async def _queued(backend: PipelineBackend, scan: int) -> set[str] | None:
    tasks = await backend.list_tasks(limit=scan + 1)
    return None if len(tasks) > scan else {task.id for task in tasks}


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
        before = now - self.settings.log_retention_s
        for table in LogTable:
            if not await self._prune(table, before, report):
                log.warning("retention: more than %d tasks are queued or dead; pass stopped",
                            self.settings.log_prune_scan)  # fmt: skip
                self.counters.undecided += 1
                report.decided = False
                break
        report.keys = await self.retained.prune_keys(before)
        self.counters.keys += report.keys
        self.counters.executions += report.deleted.get(LogTable.EXECUTIONS.value, 0)
        self.counters.receipts += report.deleted.get(LogTable.RECEIPTS.value, 0)
        self.counters.held = report.held
        return report

    async def _prune(self, table: LogTable, before: float, report: PruneReport) -> bool:
        """Up to `log_prune_batches` batches of `table`, oldest first, each checked against
        the tasks held just before its delete; False when the holds could not be told."""
        after = None
        for _ in range(self.settings.log_prune_batches):
            page = await self.retained.page(table, before, after, self.settings.log_prune_batch)
            if not page.rows:
                break
            candidates = {task_id for row in page.rows for task_id in task_ids(row.task_id)}
            held = await HeldTasks.read(self.backend, candidates, self.settings.log_prune_scan)
            if held is None:
                return False
            gone = [row for row in page.rows if not held.holds(row.task_id)]
            report.held += len(page.rows) - len(gone)
            if gone:
                deleted = await self.retained.prune(table, gone, before)
                report.deleted[table.value] = report.deleted.get(table.value, 0) + deleted
            if page.next_after is None:
                break
            after = page.next_after
        report.deleted.setdefault(table.value, 0)
        return True
