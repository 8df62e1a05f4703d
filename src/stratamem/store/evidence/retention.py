"""Retention of the pipeline's execution log (`executions`) and receipts (`layer_receipts`):
which rows may go, read and deleted in bounded batches, on either database (`store/sql.py`).

What still reads these rows, and so what is never deleted:
- an open execution (`ended_at` NULL, fenced or not): the next start of its task or lock key
  fences it (`executions.start`), and a fenced execution's late commit is refused only because
  its row is there (`executions.committed`: an attempt the log never saw passes). A killed
  worker leaves its row open for good: one row per crash, kept;
- every row of a task the pipeline still holds (queued, in flight, waiting for its retry,
  dead-lettered; the caller tells, `held`): its receipt is what lets a re-delivery, a retry or
  a requeued dead letter replay the committed result instead of running (and paying for) it
  again (the worker's reclaim path, each executor's own receipt check), and `pipeline
  reconcile` shows the receipt and execution row of each delivery in flight. A part's receipt
  (`<task>.<i>`, `<task>@<mark>`) and a waited flush's stages belong to the id before the
  first `.` or `@` (`task_ids`);
- any execution that ended, and any receipt written, less than the retention ago.

Not needed once ended, so not kept: the newest execution under a lock key or of a task. The
fencing checks read the `fences` table (`fencing_sql`), never the log, and a start fences only
open rows; once its task is no longer held, nothing looks an ended execution up again.

A batch is one page read (`page`, keyset-ordered by the end time, through an index) and one
short write transaction deleting at most a page (`delete`, which checks the age again), so a
backlog of any size never holds the store's write lock for long.

The keys that sign receipts (`receipt_keys`, `evidence/receipts.py`) go too, once nothing needs
them: a key retired more than the retention ago that no receipt names (`unused_keys`, a read;
`delete_keys`, a short write). The active key (the newest one not retired) and every other key
not retired are never deleted, nor is a key any receipt still names, the receipts of held tasks
included. Receipts are signed only with a key not retired, read in their write transaction, so
no receipt can name a key retired that long ago after the read found none.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from stratamem.store.sql import SqlConn

#: The most rows one batch reads and deletes (the size of its statement's list).
MAX_BATCH = 1000
_PART = re.compile(r"[.@]")


class LogTable(StrEnum):
    EXECUTIONS = "executions"
    RECEIPTS = "receipts"


@dataclass(frozen=True, slots=True)
class LogRow:
    """A row past the retention: whose it is, and its place in the keyset order."""

    tenant: str
    task_id: str
    key: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class LogPage:
    """Rows in keyset order, and the key to read on after (None: none left before the cutoff)."""

    rows: list[LogRow]
    next_after: tuple[Any, ...] | None


@dataclass(frozen=True, slots=True)
class _Shape:
    name: str
    columns: str
    age: str
    order: str


_SHAPES = {
    LogTable.EXECUTIONS: _Shape(
        "executions",
        "tenant, task_id, ended_at, rowid",
        "ended_at IS NOT NULL AND ended_at < ?",
        "(ended_at, rowid)",
    ),
    LogTable.RECEIPTS: _Shape(
        "layer_receipts",
        "tenant, task_id, completed_at",
        "completed_at < ?",
        "(completed_at, tenant, task_id)",
    ),
}


def task_ids(row_task_id: str) -> list[str]:
    """The task ids a row may belong to: its own, and each prefix before a `.` or `@`."""
    return [row_task_id[: m.start()] for m in _PART.finditer(row_task_id)] + [row_task_id]


def page(
    conn: SqlConn, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
) -> LogPage:
    """Up to `limit` rows of `table` that ended (executions) or were written (receipts) before
    `before`, after the key `after` (None: from the oldest). Open executions are never read."""
    shape, limit = _SHAPES[table], min(max(limit, 1), MAX_BATCH)
    where, params = shape.age, [before]
    if after is not None:
        where += f" AND {shape.order} > ({', '.join('?' for _ in after)})"
        params += list(after)
    order = shape.order.strip("()")
    rows = conn.execute(
        f"SELECT {shape.columns} FROM {shape.name} WHERE {where} ORDER BY {order} LIMIT ?",
        (*params, limit),
    ).fetchall()
    found = [LogRow(str(r[0]), str(r[1]), _key(table, r)) for r in rows]
    return LogPage(found, found[-1].key if len(found) == limit else None)


def delete(conn: SqlConn, table: LogTable, rows: Sequence[LogRow], before: float) -> int:
    """Delete `rows` (from one `page`, inside the caller's write transaction) that are still
    past `before`; returns how many went."""
    rows = rows[:MAX_BATCH]
    if not rows:
        return 0
    shape = _SHAPES[table]
    if table is LogTable.RECEIPTS:  # by primary key, one row a statement (an IN list of pairs
        return sum(  # would scan the age index instead)
            max(conn.execute(f"DELETE FROM {shape.name} WHERE {shape.age} AND tenant = ?"
                             " AND task_id = ?", (before, row.tenant, row.task_id)).rowcount, 0)
            for row in rows
        )  # fmt: skip
    marks = ", ".join("?" for _ in rows)
    cursor = conn.execute(
        f"DELETE FROM {shape.name} WHERE {shape.age} AND rowid IN ({marks})",
        (before, *(row.key[1] for row in rows)),
    )
    return max(cursor.rowcount, 0)


_UNUSED_KEYS = (
    "SELECT k.id FROM receipt_keys k WHERE k.retired_at IS NOT NULL AND k.retired_at < ?"
    " AND NOT EXISTS (SELECT 1 FROM layer_receipts r WHERE r.key_id = k.id)"
    " ORDER BY k.retired_at, k.id LIMIT ?"
)


def unused_keys(conn: SqlConn, before: float) -> list[str]:
    """Up to `MAX_BATCH` receipt keys retired before `before` that no receipt names."""
    return [str(row[0]) for row in conn.execute(_UNUSED_KEYS, (before, MAX_BATCH)).fetchall()]


def delete_keys(conn: SqlConn, key_ids: Sequence[str], before: float) -> int:
    """Delete the keys `key_ids` (from `unused_keys`) still retired before `before`, inside the
    caller's write transaction; returns how many went."""
    key_ids = key_ids[:MAX_BATCH]
    if not key_ids:
        return 0
    marks = ", ".join("?" for _ in key_ids)
    cursor = conn.execute(
        "DELETE FROM receipt_keys WHERE retired_at IS NOT NULL AND retired_at < ?"
        f" AND id IN ({marks})",
        (before, *key_ids),
    )
    return max(cursor.rowcount, 0)


def _key(table: LogTable, row: Any) -> tuple[Any, ...]:
    if table is LogTable.EXECUTIONS:
        return (float(row[2]), int(row[3]))
    return (float(row[2]), str(row[0]), str(row[1]))


class RetentionRecords(Protocol):
    """The store side (`EvidenceStore` has it); any tenant."""

    def log_page(
        self, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
    ) -> LogPage:
        """Up to `limit` ended executions (or receipts) older than `before`, oldest first,
        after the key `after` (None: from the oldest). Open executions are never listed."""

    def prune_log(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int:
        """Delete `rows` (of one `log_page`) still older than `before`, in one short write
        transaction; returns how many went. The caller leaves out the rows still needed."""

    def prune_receipt_keys(self, before: float) -> int:
        """Delete the receipt keys retired before `before` that no receipt names (never the
        active key, nor one not retired); returns how many went."""


class ThreadedRetainedLog:
    """Retention's store side for the pipeline (`pipeline.retention.RetainedLog`)."""

    def __init__(self, records: RetentionRecords) -> None:
        self._records = records

    async def page(
        self, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
    ) -> LogPage:
        return await asyncio.to_thread(self._records.log_page, table, before, after, limit)

    async def prune(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int:
        return await asyncio.to_thread(self._records.prune_log, table, rows, before)

    async def prune_keys(self, before: float) -> int:
        return await asyncio.to_thread(self._records.prune_receipt_keys, before)
