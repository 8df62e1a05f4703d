"""The execution log: every execution of a pipeline task, with its window and what ended it.

A worker records an execution when it starts (after taking the task's lock, before the executor
runs) and again when the executor returns, whatever the result; a killed worker leaves its row
open. A waited flush records each of its stages the same way (`layers.executors.flush_in_turn`).
A row carries the `Attempt` (task id, attempt number, delivery count, fencing token, worker,
start time), the task's type, session and lock key, and:
- `committed_at`: when the execution last committed effects (its receipt, `receipt_rows`);
- `ended_at` and `outcome` (completed, skipped, failed, aborted, cancelled);
- `fenced_at`: when a later execution of the same task, or under a newer token of the same
  lock, started while this one was still open; from then on its writes are refused.

The rules that make the rows evidence (all in the store's write transactions):
- a start records the lock's token as a fence (`StaleFencingToken` if a newer one was seen:
  the execution does not run) and fences every open execution of its task or lock key;
- a receipt bound to an attempt is refused (`StaleFencingToken`) once that attempt's execution
  is fenced, so a lockless task (offload-l1, offload-l15) is fenced too;
- the start, end and commit times are read inside the transaction, after its locks are taken
  (on SQLite every write is serialised; on PostgreSQL the lock key's fence row serialises
  them), so they follow the order in which the rows were written.

An execution's window is [`started_at`, `end`], `end` the earlier of `ended_at` and
`fenced_at`. Windows of one task, and of one lock key, never overlap, and every commit lies in
its window: `tests/scheduler/test_chaos.py` checks both over a chaotic run, from these rows.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from stratamem.clock import Clock
from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.store.evidence.receipts import Attempt
from stratamem.store.sql import SqlConn

_COLUMNS = (
    "task_id, attempt, delivery, token, worker, started_at, type, session, lock_key,"
    " committed_at, ended_at, outcome, fenced_at"
)
_MATCH = (
    "tenant = ? AND task_id = ? AND attempt = ? AND delivery = ? AND worker = ?"
    " AND started_at = ?"
)


@dataclass(frozen=True, slots=True)
class ExecutionStart:
    """What a worker knows of an execution before it runs (its start time the log sets)."""

    task_id: str
    type: str
    session: str | None
    lock_key: str | None
    attempt: int
    delivery: int
    token: int | None
    worker: str
    fence_owner: str | None = None
    """The lock grant's owner, recorded with `token` as the key's fence (`store.fencing_sql`):
    a start under the same token from another owner is refused."""


@dataclass(frozen=True, slots=True)
class Execution:
    """One row of the log (see the module doc)."""

    attempt: Attempt
    type: str
    session: str | None
    lock_key: str | None
    committed_at: float | None = None
    ended_at: float | None = None
    outcome: str | None = None
    fenced_at: float | None = None

    @property
    def end(self) -> float | None:
        """When the execution stopped having effect (None: still open)."""
        ends = [t for t in (self.ended_at, self.fenced_at) if t is not None]
        return min(ends) if ends else None

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["attempt"] = self.attempt.to_json()
        return body


def start(conn: SqlConn, tenant: str, start: ExecutionStart, now: float) -> Attempt:
    """Insert the row (the caller's transaction checked and recorded the lock's fence) and
    fence the open executions of the same task or lock key."""
    conn.execute(
        "UPDATE executions SET fenced_at = ? WHERE tenant = ? AND ended_at IS NULL"
        " AND fenced_at IS NULL AND (task_id = ? OR lock_key = ?)",
        (now, tenant, start.task_id, start.lock_key),
    )
    attempt = Attempt(start.task_id, start.attempt, start.delivery, start.token, start.worker,
                      now)  # fmt: skip
    conn.execute(
        f"INSERT INTO executions (tenant, {_COLUMNS}) VALUES"
        " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL)",
        (tenant, attempt.task_id, attempt.attempt, attempt.delivery, attempt.token,
         attempt.worker, now, start.type, start.session, start.lock_key),
    )
    return attempt


def end(conn: SqlConn, tenant: str, attempt: Attempt, outcome: str, clock: Clock) -> None:
    """Close the row of `attempt` (a fenced row keeps its `fenced_at`)."""
    row = conn.execute(f"SELECT lock_key FROM executions WHERE {_MATCH}",
                       _key(attempt, tenant)).fetchone()  # fmt: skip
    if row is None:
        return
    if row[0] is not None:  # serialised with the starts under the same lock (PostgreSQL)
        conn.execute("UPDATE fences SET token = token WHERE key = ?", (row[0],))
    conn.execute(
        f"UPDATE executions SET ended_at = ?, outcome = ? WHERE {_MATCH}",
        (clock.now(), outcome, *_key(attempt, tenant)),
    )


def committed(conn: SqlConn, tenant: str, attempt: Attempt, at: float) -> None:
    """Note a commit of `attempt`'s effects (inside their transaction); `StaleFencingToken`
    if its execution was fenced. An attempt the log never saw (work run outside a worker with
    an execution log) passes."""
    done = conn.execute(
        f"UPDATE executions SET committed_at = ? WHERE {_MATCH} AND fenced_at IS NULL"
        " RETURNING 1",
        (at, *_key(attempt, tenant)),
    ).fetchone()
    if done is not None:
        return
    fenced = conn.execute(f"SELECT fenced_at FROM executions WHERE {_MATCH}",
                          _key(attempt, tenant)).fetchone()  # fmt: skip
    if fenced is not None:
        raise StaleFencingToken(
            f"{attempt.task_id} (attempt {attempt.attempt}, delivery {attempt.delivery},"
            f" {attempt.worker}) was fenced at {fenced[0]}: a later execution started"
        )


def listing(conn: SqlConn, tenant: str, task_id: str | None, limit: int) -> list[Execution]:
    """The tenant's executions (of one task), in the order they started."""
    where, params = "tenant = ?", [tenant]
    if task_id is not None:
        where, params = where + " AND task_id = ?", [tenant, task_id]
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM executions WHERE {where} ORDER BY started_at, rowid LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [_from_row(row) for row in rows]


def _key(attempt: Attempt, tenant: str) -> tuple[Any, ...]:
    """`_MATCH`'s parameters."""
    return (tenant, attempt.task_id, attempt.attempt, attempt.delivery, attempt.worker,
            attempt.started_at)  # fmt: skip


def _from_row(row: Any) -> Execution:
    token = None if row[3] is None else int(row[3])
    attempt = Attempt(str(row[0]), int(row[1]), int(row[2]), token, str(row[4]), float(row[5]))
    return Execution(attempt, str(row[6]), row[7], row[8], row[9], row[10], row[11], row[12])


class ExecutionRecords(Protocol):
    """The store side of the log (`EvidenceStore` has it)."""

    def start_execution(self, scope: Scope, start: ExecutionStart, clock: Clock) -> Attempt:
        """Record an execution starting now (`clock`, read in the transaction), fencing the open
        ones of its task and lock key; `StaleFencingToken` if a newer token of its lock was
        seen. Returns its `Attempt`."""

    def end_execution(self, scope: Scope, attempt: Attempt, outcome: str, clock: Clock) -> None:
        """Record that the execution `attempt` ended now with `outcome`."""

    def executions(
        self, scope: Scope, task_id: str | None = None, limit: int = 1000
    ) -> list[Execution]:
        """The tenant's executions (of one task), in the order they started."""


class ThreadedExecutionLog:
    """The log for the worker (`pipeline.executors.ExecutionLog`) over a store's records."""

    def __init__(self, records: ExecutionRecords) -> None:
        self._records = records

    async def started(self, tenant: str, start: ExecutionStart, clock: Clock) -> Attempt:
        return await asyncio.to_thread(self._records.start_execution, Scope(tenant), start, clock)

    async def ended(self, tenant: str, attempt: Attempt, outcome: str, clock: Clock) -> None:
        await asyncio.to_thread(self._records.end_execution, Scope(tenant), attempt, outcome,
                                clock)  # fmt: skip

