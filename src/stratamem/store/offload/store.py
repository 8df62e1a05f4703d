"""`SqlOffloadStore`: the offload store contract on a SQL store's connection (SQLite or
PostgreSQL, `sql.py`).

Results live in `offload_refs` rows; no caller identifier ever becomes a path or SQL text (every
value is a bound parameter).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Sequence
from typing import Any, ParamSpec, TypeVar

from stratamem.domain import Mode, Scope
from stratamem.errors import NotFound, StoreError
from stratamem.store import backlog
from stratamem.store.core.port import Fence
from stratamem.store.evidence import receipt_rows
from stratamem.store.evidence.receipts import Receipt, ReceiptDraft
from stratamem.store.failures import rows as failure_rows
from stratamem.store.failures.records import Failure
from stratamem.store.offload.records import (
    Appended,
    Boundary,
    Claim,
    ClaimCommit,
    Decision,
    Diagram,
    DiagramWrite,
    Entry,
    JudgmentCommit,
    Mark,
    NewEntry,
    OffloadOwed,
    OffloadStage,
    Ref,
    Routed,
    TaskStatus,
    ToolPair,
    VersionConflict,
)
from stratamem.store.sql import DATABASE_ERRORS, SqlConn, SqlStore

_ENTRY_COLUMNS = (
    "session, call_id, tool, summary, score, ref_id, ts, result_chars, mode, task_id, node_id,"
    " created_at"
)
_PAIR_COLUMNS = "call_id, tool, params, result, error, ts, duration_ms"
_TASK_COLUMNS = (
    "task_id, session, label, status, long_task, mermaid, version, created_at, updated_at"
)
P = ParamSpec("P")
R = TypeVar("R")
_PENDING = (
    "tenant = ? AND session = ? AND done = 0 AND (claim_id IS NULL OR claim_expires <= ?)"
)


def _translated(method: Callable[P, R]) -> Callable[P, R]:
    """Database failures (a locked file past the busy timeout, a full disk, a lost connection)
    as `StoreError`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"offload store: {exc}") from exc

    return wrapper


class SqlOffloadStore:
    """Offload tables beside the store's own (SQLite migration 20), on its connection."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    # -- tool pairs and claims ---------------------------------------------------------------
    @_translated
    def append_pairs(
        self, scope: Scope, session: str, pairs: Sequence[ToolPair], now: float
    ) -> Appended:
        stored: list[str] = []
        duplicates: list[str] = []
        with self._store.writing(key=scope.tenant) as conn:
            for pair in pairs:
                cursor = conn.execute(
                    "INSERT INTO offload_pairs (tenant, session, call_id, tool, params,"
                    " result, error, ts, duration_ms, received_at) VALUES (?,?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT DO NOTHING",
                    _pair_params(scope.tenant, session, pair, now),
                )
                (stored if cursor.rowcount else duplicates).append(pair.call_id)
            pending = conn.execute(
                "SELECT COUNT(*) FROM offload_pairs WHERE tenant = ? AND session = ? AND done = 0",
                (scope.tenant, session),
            ).fetchone()[0]
        return Appended(tuple(stored), tuple(duplicates), int(pending))

    @_translated
    def claim_pairs(
        self, scope: Scope, session: str, claim_id: str, now: float, lease_s: float, limit: int
    ) -> Claim:
        key = (scope.tenant, session)
        with self._store.writing(key=scope.tenant) as conn:
            done = conn.execute(
                "UPDATE offload_pairs SET done = 1, claim_id = NULL WHERE " + _PENDING
                + " AND call_id IN (SELECT call_id FROM offload_entries"
                " WHERE tenant = ? AND session = ?) RETURNING call_id",
                (*key, now, *key),
            ).fetchall()
            conn.execute(
                "UPDATE offload_pairs SET claim_id = ?, claim_expires = ? WHERE rid IN"
                " (SELECT rid FROM offload_pairs WHERE " + _PENDING + " ORDER BY rid LIMIT ?)",
                (claim_id, now + lease_s, *key, now, limit),
            )
            rows = conn.execute(
                f"SELECT {_PAIR_COLUMNS} FROM offload_pairs WHERE tenant = ? AND session = ?"
                " AND claim_id = ? AND done = 0 ORDER BY rid",
                (*key, claim_id),
            ).fetchall()
        return Claim(claim_id, tuple(_pair(r) for r in rows), tuple(r[0] for r in done))

    @_translated
    def next_claim_expiry(self, scope: Scope, session: str, now: float) -> float | None:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT MIN(claim_expires) FROM offload_pairs WHERE tenant = ? AND session = ?"
                " AND done = 0 AND claim_id IS NOT NULL AND claim_expires > ?",
                (scope.tenant, session, now),
            ).fetchone()
        return None if row[0] is None else float(row[0])

    @_translated
    def release_claim(self, scope: Scope, session: str, claim_id: str) -> int:
        with self._store.writing(key=scope.tenant) as conn:
            cursor = conn.execute(
                "UPDATE offload_pairs SET claim_id = NULL, claim_expires = NULL"
                " WHERE tenant = ? AND session = ? AND claim_id = ? AND done = 0",
                (scope.tenant, session, claim_id),
            )
        return cursor.rowcount

    @_translated
    def complete_claim(self, scope: Scope, session: str, commit: ClaimCommit) -> list[Entry]:
        created: list[Entry] = []
        now = commit.now
        with self._store.writing(key=scope.tenant) as conn:
            if commit.receipt is not None:
                receipt_rows.write_receipt(conn, scope.tenant, commit.receipt)
            for item in commit.entries:
                ref_id = commit.ref_ids[item.pair.call_id]
                entry = _insert_entry(conn, scope.tenant, session, item, ref_id, now)
                if entry is not None:
                    created.append(entry)
                conn.execute(
                    "UPDATE offload_pairs SET done = 1, claim_id = NULL"
                    " WHERE tenant = ? AND session = ? AND call_id = ?",
                    (scope.tenant, session, item.pair.call_id),
                )
            failure_rows.resolve_open(conn, scope.tenant, OffloadStage.L1.value, session, now)
        return created

    # -- entries and refs --------------------------------------------------------------------
    @_translated
    def list_entries(
        self, scope: Scope, session: str, call_ids: Sequence[str] | None = None
    ) -> list[Entry]:
        sql = f"SELECT {_ENTRY_COLUMNS} FROM offload_entries WHERE tenant = ? AND session = ?"
        params: list[object] = [scope.tenant, session]
        if call_ids is not None:
            if not call_ids:
                return []
            sql += f" AND call_id IN ({', '.join('?' for _ in call_ids)})"
            params.extend(call_ids)
        with self._store.reading() as conn:
            rows = conn.execute(sql + " ORDER BY ts, call_id", params).fetchall()
        return [_entry(r) for r in rows]

    @_translated
    def unmapped_entries(self, scope: Scope, session: str) -> list[Entry]:
        with self._store.reading() as conn:
            rows = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM offload_entries WHERE tenant = ? AND session = ?"
                " AND task_id IS NOT NULL AND node_id IS NULL ORDER BY ts, call_id",
                (scope.tenant, session),
            ).fetchall()
        return [_entry(r) for r in rows]

    @_translated
    def get_ref(self, scope: Scope, ref_id: str) -> Ref:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT ref_id, session, call_id, tool, content FROM offload_refs"
                " WHERE tenant = ? AND ref_id = ?",
                (scope.tenant, ref_id),
            ).fetchone()
        if row is None:
            raise NotFound(f"no ref {ref_id!r} in tenant {scope.tenant!r}")
        return Ref(row[0], row[1], row[2], row[3], row[4])

    # -- boundaries and judgments ------------------------------------------------------------
    @_translated
    def add_mark(self, scope: Scope, session: str, mark: Mark) -> bool:
        with self._store.writing(key=scope.tenant) as conn:
            cursor = conn.execute(
                "INSERT INTO offload_marks (tenant, session, mark_id, ts, text)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (scope.tenant, session, mark.mark_id, mark.timestamp, mark.text),
            )
        return cursor.rowcount > 0

    @_translated
    def get_mark(self, scope: Scope, session: str, mark_id: str) -> Mark:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT mark_id, session, ts, text, task_id, judged FROM offload_marks"
                " WHERE tenant = ? AND session = ? AND mark_id = ?",
                (scope.tenant, session, mark_id),
            ).fetchone()
        if row is None:
            raise NotFound(f"no boundary {mark_id!r} in session {session!r}")
        return _mark(row)

    @_translated
    def recent_marks(self, scope: Scope, session: str, until_ts: float, limit: int) -> list[Mark]:
        with self._store.reading() as conn:
            rows = conn.execute(
                "SELECT mark_id, session, ts, text, task_id, judged FROM offload_marks"
                " WHERE tenant = ? AND session = ? AND ts <= ? ORDER BY ts DESC, mark_id DESC"
                " LIMIT ?",
                (scope.tenant, session, until_ts, limit),
            ).fetchall()
        return [_mark(r) for r in reversed(rows)]

    @_translated
    def unjudged_marks(self, scope: Scope, session: str) -> list[Mark]:
        with self._store.reading() as conn:
            rows = conn.execute(
                "SELECT mark_id, session, ts, text, task_id, judged FROM offload_marks"
                " WHERE tenant = ? AND session = ? AND judged = 0 ORDER BY ts, mark_id",
                (scope.tenant, session),
            ).fetchall()
        return [_mark(r) for r in rows]

    @_translated
    def sessions_owing(
        self,
        after: tuple[str, str] | None,
        now: float,
        limit: int,
        stages: Collection[OffloadStage] | None = None,
    ) -> list[OffloadOwed]:
        with self._store.reading() as conn:
            return backlog.offload_owed(conn, after, now, limit, stages)

    @_translated
    def pending_pairs(self, scope: Scope, session: str) -> int:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM offload_pairs WHERE tenant = ? AND session = ? AND done = 0",
                (scope.tenant, session),
            ).fetchone()
        return int(row[0])

    @_translated
    def boundary(self, scope: Scope, session: str) -> Boundary:
        with self._store.reading() as conn:
            return _boundary(conn, scope.tenant, session)

    @_translated
    def apply_decision(self, scope: Scope, session: str, commit: JudgmentCommit) -> Routed:
        tenant, now = scope.tenant, commit.now
        with self._store.writing(key=scope.tenant) as conn:
            if commit.receipt is not None:
                receipt_rows.write_receipt(conn, tenant, commit.receipt)
            current = _boundary(conn, tenant, session)
            if current.version != commit.expected_version:
                raise VersionConflict(
                    f"boundary of session {session!r} is at version {current.version},"
                    f" not {commit.expected_version}"
                )
            mark = _mark_row(conn, tenant, session, commit.mark_id)
            task_id = _decide_task(conn, tenant, session, current, commit.decision,
                                   commit.new_task_id, now)  # fmt: skip
            _set_mark_task(conn, tenant, session, mark, task_id)
            routed = _route_mark(conn, tenant, session, mark, task_id)
            boundary = _write_boundary(conn, tenant, session, current, mark, task_id, now)
            failure_rows.resolve_open(conn, tenant, OffloadStage.L15.value, session, now)
        return Routed(boundary, task_id, routed)

    # -- receipts ----------------------------------------------------------------------------
    @_translated
    def receipt(self, scope: Scope, task_id: str) -> Receipt | None:
        with self._store.reading() as conn:
            return receipt_rows.read_receipt(conn, scope.tenant, task_id)

    @_translated
    def record_receipt(self, scope: Scope, draft: ReceiptDraft, fence: Fence | None) -> None:
        with self._store.writing(fence) as conn:
            receipt_rows.write_receipt(conn, scope.tenant, draft)

    # -- diagrams ----------------------------------------------------------------------------
    @_translated
    def list_diagrams(self, scope: Scope, session: str) -> list[Diagram]:
        with self._store.reading() as conn:
            rows = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM offload_tasks WHERE tenant = ? AND session = ?"
                " ORDER BY updated_at DESC, task_id",
                (scope.tenant, session),
            ).fetchall()
        return [_diagram(r) for r in rows]

    @_translated
    def save_diagram(
        self, scope: Scope, session: str, write: DiagramWrite, now: float, fence: Fence | None
    ) -> Diagram:
        key = (scope.tenant, session, write.task_id)
        with self._store.writing(fence, key=scope.tenant) as conn:
            cursor = conn.execute(
                "UPDATE offload_tasks SET mermaid = ?, version = version + 1, updated_at = ?"
                " WHERE tenant = ? AND session = ? AND task_id = ? AND version = ?",
                (write.mermaid, now, *key, write.expected_version),
            )
            if cursor.rowcount != 1:
                raise VersionConflict(
                    f"diagram {write.task_id!r} is no longer at version {write.expected_version}"
                )
            conn.executemany(
                "UPDATE offload_entries SET node_id = ? WHERE tenant = ? AND session = ?"
                " AND call_id = ? AND task_id = ?",
                [(node, scope.tenant, session, call, write.task_id)
                 for call, node in write.mapping.items()],
            )  # fmt: skip
            row = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM offload_tasks"
                " WHERE tenant = ? AND session = ? AND task_id = ?",
                key,
            ).fetchone()
            failure_rows.resolve_open(conn, scope.tenant, OffloadStage.L2.value, session, now)
        return _diagram(row)

    # -- failures ----------------------------------------------------------------------------
    @_translated
    def record_failures(self, failures: Sequence[Failure]) -> None:
        with self._store.writing() as conn:
            failure_rows.insert_failures(conn, failures)


# -- rows ------------------------------------------------------------------------------------
def _pair_params(tenant: str, session: str, pair: ToolPair, now: float) -> tuple[object, ...]:
    return (
        tenant,
        session,
        pair.call_id,
        pair.tool,
        json.dumps(pair.params, ensure_ascii=False, sort_keys=True),
        pair.result,
        pair.error,
        pair.timestamp,
        pair.duration_ms,
        now,
    )


def _pair(row: Any) -> ToolPair:
    return ToolPair(
        call_id=row[0],
        tool=row[1],
        params=json.loads(row[2]),
        result=row[3],
        error=row[4],
        timestamp=float(row[5]),
        duration_ms=row[6],
    )


def _entry(row: Any) -> Entry:
    return Entry(
        session=row[0],
        call_id=row[1],
        tool=row[2],
        summary=row[3],
        score=int(row[4]),
        ref_id=row[5],
        timestamp=float(row[6]),
        result_chars=int(row[7]),
        mode=Mode(row[8]),
        task_id=row[9],
        node_id=row[10],
        created_at=float(row[11]),
    )


def _mark(row: Any) -> Mark:
    return Mark(row[0], row[1], float(row[2]), row[3], row[4], bool(row[5]))


def _diagram(row: Any) -> Diagram:
    return Diagram(
        task_id=row[0],
        session=row[1],
        label=row[2],
        status=TaskStatus(row[3]),
        long_task=bool(row[4]),
        mermaid=row[5],
        version=int(row[6]),
        created_at=float(row[7]),
        updated_at=float(row[8]),
    )


def _insert_entry(
    conn: SqlConn, tenant: str, session: str, item: NewEntry, ref_id: str, now: float
) -> Entry | None:
    pair = item.pair
    task_id = _covering_task(conn, tenant, session, pair.timestamp)
    output = pair.output
    cursor = conn.execute(
        f"INSERT INTO offload_entries (tenant, {_ENTRY_COLUMNS})"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?) ON CONFLICT DO NOTHING",
        (tenant, session, pair.call_id, pair.tool, item.summary, item.score, ref_id,
         pair.timestamp, len(output), item.mode.value, task_id, now),
    )  # fmt: skip
    if not cursor.rowcount:
        return None
    conn.execute(
        "INSERT INTO offload_refs (tenant, ref_id, session, call_id, tool, content,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (tenant, ref_id, session, pair.call_id, pair.tool, output, now),
    )
    return Entry(session, pair.call_id, pair.tool, item.summary, item.score, ref_id,
                 pair.timestamp, len(output), item.mode, task_id, None, now)  # fmt: skip


def _covering_task(conn: SqlConn, tenant: str, session: str, ts: float) -> str | None:
    """The task of the boundary that covers `ts`: None while that boundary awaits judgment;
    the active task when no boundary precedes `ts`."""
    row = conn.execute(
        "SELECT task_id, judged FROM offload_marks WHERE tenant = ? AND session = ? AND ts <= ?"
        " ORDER BY ts DESC, mark_id DESC LIMIT 1",
        (tenant, session, ts),
    ).fetchone()
    if row is not None:
        return row[0] if row[1] else None
    return _boundary(conn, tenant, session).active_task


def _boundary(conn: SqlConn, tenant: str, session: str) -> Boundary:
    row = conn.execute(
        "SELECT version, active_task, last_mark_ts FROM offload_boundaries"
        " WHERE tenant = ? AND session = ?",
        (tenant, session),
    ).fetchone()
    if row is None:
        return Boundary(session, 0, None, None)
    return Boundary(session, int(row[0]), row[1], row[2])


def _mark_row(conn: SqlConn, tenant: str, session: str, mark_id: str) -> Mark:
    row = conn.execute(
        "SELECT mark_id, session, ts, text, task_id, judged FROM offload_marks"
        " WHERE tenant = ? AND session = ? AND mark_id = ?",
        (tenant, session, mark_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"no boundary {mark_id!r} in session {session!r}")
    return _mark(row)


def _decide_task(
    conn: SqlConn,
    tenant: str,
    session: str,
    current: Boundary,
    decision: Decision,
    new_task_id: str,
    now: float,
) -> str | None:
    """Apply statuses; return the task the judged boundary routes to (None: no task)."""
    if decision.completed and current.active_task is not None:
        _set_status(conn, tenant, session, current.active_task, TaskStatus.COMPLETED, now)
    if decision.continues is not None:
        chosen: str | None = decision.continues
    elif decision.new_label is not None:
        conn.execute(
            "INSERT INTO offload_tasks (tenant, session, task_id, label, status,"
            " long_task, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (tenant, session, new_task_id, decision.new_label, TaskStatus.OPEN.value,
             int(decision.long_task), now, now),
        )  # fmt: skip
        chosen = new_task_id
    else:
        chosen = None if decision.completed else current.active_task
    if chosen is not None:
        if chosen != current.active_task:
            _set_status(conn, tenant, session, chosen, TaskStatus.OPEN, now)
        if decision.long_task:
            conn.execute(
                "UPDATE offload_tasks SET long_task = 1 WHERE tenant = ? AND session = ?"
                " AND task_id = ?",
                (tenant, session, chosen),
            )
    return chosen


def _set_status(
    conn: SqlConn, tenant: str, session: str, task_id: str, status: TaskStatus,
    now: float,
) -> None:  # fmt: skip
    conn.execute(
        "UPDATE offload_tasks SET status = ?, updated_at = ? WHERE tenant = ? AND session = ?"
        " AND task_id = ?",
        (status.value, now, tenant, session, task_id),
    )


def _set_mark_task(
    conn: SqlConn, tenant: str, session: str, mark: Mark, task_id: str | None
) -> None:
    conn.execute(
        "UPDATE offload_marks SET task_id = ?, judged = 1 WHERE tenant = ? AND session = ?"
        " AND mark_id = ?",
        (task_id, tenant, session, mark.mark_id),
    )


def _route_mark(
    conn: SqlConn, tenant: str, session: str, mark: Mark, task_id: str | None
) -> int:
    """Route the unrouted entries in the mark's stretch of time (until the next boundary)."""
    if task_id is None:
        return 0
    row = conn.execute(
        "SELECT MIN(ts) FROM offload_marks WHERE tenant = ? AND session = ? AND ts > ?",
        (tenant, session, mark.timestamp),
    ).fetchone()
    until = float("inf") if row[0] is None else float(row[0])
    cursor = conn.execute(
        "UPDATE offload_entries SET task_id = ? WHERE tenant = ? AND session = ?"
        " AND task_id IS NULL AND ts >= ? AND ts < ?",
        (task_id, tenant, session, mark.timestamp, until),
    )
    return cursor.rowcount


def _write_boundary(
    conn: SqlConn,
    tenant: str,
    session: str,
    current: Boundary,
    mark: Mark,
    task_id: str | None,
    now: float,
) -> Boundary:
    """Bump the version; the active task follows only the newest judged boundary."""
    newest = current.last_mark_ts is None or mark.timestamp >= current.last_mark_ts
    active = task_id if newest else current.active_task
    last = mark.timestamp if newest else current.last_mark_ts
    conn.execute(
        "INSERT INTO offload_boundaries (tenant, session, version, active_task, last_mark_ts,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, session) DO UPDATE SET"
        " version = excluded.version, active_task = excluded.active_task,"
        " last_mark_ts = excluded.last_mark_ts, updated_at = excluded.updated_at",
        (tenant, session, current.version + 1, active, last, now),
    )
    if newest and current.active_task not in (None, active):
        conn.execute(
            "UPDATE offload_tasks SET status = ? WHERE tenant = ? AND session = ?"
            " AND task_id = ? AND status = ?",
            (TaskStatus.OPEN.value, tenant, session, current.active_task, TaskStatus.ACTIVE.value),
        )
    if newest and active is not None:
        _set_status(conn, tenant, session, active, TaskStatus.ACTIVE, now)
    return Boundary(session, current.version + 1, active, last)
