"""The `failures` table (migrations 12 and 14): written by the layer and the offload stores,
inside their own transactions, and read through the layer store.

A retryable record (`quarantine`, `stage`) is written once per condition: when an open record
of the same tenant, kind, stage, session and condition key exists, it is updated (attempts + 1,
last seen, error, task, raw replies appended within `MAX_RAWS`) instead of a new one inserted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stratamem.errors import LayerConflict, NotFound
from stratamem.store.failures.records import (
    RETRYABLE,
    Failure,
    FailureKind,
    FailureQuery,
    FailureStatus,
)
from stratamem.store.sql import DUPLICATE, SqlConn

_COLUMNS = (
    "tenant, id, kind, status, stage, session, task_id, error, raws, turn_ids, detail, attempts,"
    " failed_at, resolved_at, condition_key, last_seen_at, retry_at, auto_retries"
)
_MARKS = ", ".join("?" for _ in _COLUMNS.split(","))
MAX_RAWS = 20
"""Raw replies kept per record; a record retried many times keeps the first and the latest."""


#: Detail fields that name what a retry re-runs: records differing in them are two conditions.
_TARGET_FIELDS = ("mark", "task")


def condition_key(failure: Failure) -> str:
    """The condition a retryable record stands for (empty for noted kinds): one quarantined
    turn; or a stage failing for one reason (`Failure.condition`, else the error's type), for
    one message or task diagram where the record names one."""
    if failure.kind not in RETRYABLE or failure.status is not FailureStatus.OPEN:
        return ""
    if failure.kind is FailureKind.QUARANTINE:
        return "turns:" + ",".join(sorted(failure.turn_ids))
    reason = failure.condition or failure.error.partition(":")[0].strip()
    targets = [f"{k}={failure.detail[k]}" for k in _TARGET_FIELDS if k in failure.detail]
    return "|".join([reason, *targets])


def insert_failures(conn: SqlConn, failures: Sequence[Failure]) -> None:
    """Write `failures`: each retryable one updates the open record of its condition if there
    is one, the others are inserted."""
    try:
        for failure in failures:  # in order: a condition twice in one batch is one record
            key = condition_key(failure)
            if not key or not _seen_again(conn, failure, key):
                conn.execute(f"INSERT INTO failures ({_COLUMNS}) VALUES ({_MARKS})",
                             _params(failure))  # fmt: skip
    except DUPLICATE as exc:
        raise LayerConflict(f"a failure record of this run exists already: {exc}") from exc


def _seen_again(conn: SqlConn, failure: Failure, key: str) -> bool:
    """Update the open record of `key` with `failure`; False when there is none."""
    session_is = "session IS NULL" if failure.session is None else "session = ?"
    params: list[object] = [failure.tenant, failure.kind.value, failure.stage, key]
    params += [] if failure.session is None else [failure.session]
    row = conn.execute(
        "SELECT id, raws FROM failures WHERE tenant = ? AND kind = ? AND stage = ?"
        f" AND condition_key = ? AND status = 'open' AND {session_is} ORDER BY rid DESC LIMIT 1",
        params,
    ).fetchone()
    if row is None:
        return False
    kept = json.dumps(list(_bounded([*json.loads(row["raws"]), *failure.raws])),
                      ensure_ascii=False)  # fmt: skip
    conn.execute(
        "UPDATE failures SET attempts = attempts + 1, last_seen_at = ?, error = ?, task_id = ?,"
        " raws = ? WHERE tenant = ? AND id = ?",
        (failure.failed_at, failure.error, failure.task_id, kept, failure.tenant, row["id"]),
    )
    return True


def _params(failure: Failure) -> tuple[object, ...]:
    return (
        failure.tenant, failure.id, failure.kind.value, failure.status.value, failure.stage,
        failure.session, failure.task_id, failure.error,
        json.dumps(list(_bounded(failure.raws)), ensure_ascii=False),
        json.dumps(list(failure.turn_ids)), json.dumps(failure.detail, ensure_ascii=False),
        failure.attempts, failure.failed_at, failure.resolved_at, condition_key(failure),
        failure.last_seen_at, failure.retry_at, failure.auto_retries,
    )  # fmt: skip


def _bounded(raws: Sequence[str]) -> Sequence[str]:
    return raws if len(raws) <= MAX_RAWS else [raws[0], *raws[-(MAX_RAWS - 1) :]]


def resolve_open(
    conn: SqlConn, tenant: str, stage: str, session: str | None, now: float
) -> None:
    """A stage committed: its open `stage` failures (of `session`, or of the tenant when None)
    are resolved."""
    sql = (
        "UPDATE failures SET status = 'resolved', resolved_at = ?, retry_at = NULL"
        " WHERE tenant = ? AND stage = ? AND kind = 'stage' AND status = 'open'"
    )
    params: list[object] = [now, tenant, stage]
    if session is not None:
        sql += " AND session = ?"
        params.append(session)
    conn.execute(sql, params)


def query_failures(
    conn: SqlConn, tenant: str, query: FailureQuery
) -> list[Failure]:
    where = ["tenant = ?"]
    params: list[object] = [tenant]
    for column, value in (("session", query.session), ("stage", query.stage),
                          ("kind", query.kind), ("status", query.status)):  # fmt: skip
        if value is not None:
            where.append(f"{column} = ?")
            params.append(str(value))
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM failures WHERE {' AND '.join(where)}"
        " ORDER BY rid DESC LIMIT ? OFFSET ?",
        (*params, query.limit, query.offset),
    ).fetchall()
    return [failure_from_row(row) for row in rows]


def get_failure(conn: SqlConn, tenant: str, failure_id: str) -> Failure:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM failures WHERE tenant = ? AND id = ?", (tenant, failure_id)
    ).fetchone()
    if row is None:
        raise NotFound(f"no failure {failure_id!r} in tenant {tenant!r}")
    return failure_from_row(row)


def resolve_retry(conn: SqlConn, tenant: str, failure_id: str, now: float) -> Failure:
    """Count a retry of an open failure that succeeded: resolved (the
    `LayerStore.resolve_retry` contract)."""
    _open_failure(conn, tenant, failure_id)
    conn.execute(
        "UPDATE failures SET status = 'resolved', resolved_at = ?, attempts = attempts + 1,"
        " retry_at = NULL WHERE tenant = ? AND id = ?",
        (now, tenant, failure_id),
    )
    return get_failure(conn, tenant, failure_id)


def note_retry(
    conn: SqlConn, tenant: str, failure_id: str, now: float, error: str, raws: Sequence[str]
) -> Failure:
    """Count a retry of an open failure that failed again: still open (the
    `LayerStore.note_retry` contract)."""
    current = _open_failure(conn, tenant, failure_id)
    kept = json.dumps(list(_bounded([*current.raws, *raws])), ensure_ascii=False)
    conn.execute(
        "UPDATE failures SET error = ?, raws = ?, attempts = attempts + 1, last_seen_at = ?"
        " WHERE tenant = ? AND id = ?",
        (error, kept, now, tenant, failure_id),
    )
    return get_failure(conn, tenant, failure_id)


def _open_failure(conn: SqlConn, tenant: str, failure_id: str) -> Failure:
    current = get_failure(conn, tenant, failure_id)
    if current.status is not FailureStatus.OPEN:
        raise LayerConflict(f"failure {failure_id!r} is {current.status.value}, not open")
    return current


def schedule_retry(
    conn: SqlConn, tenant: str, failure_id: str, retry_at: float | None, auto_retries: int
) -> None:
    """When an open record is retried by itself next (None: it waits for an operator), and how
    many automatic retries it had."""
    conn.execute(
        "UPDATE failures SET retry_at = ?, auto_retries = ? WHERE tenant = ? AND id = ?"
        " AND status = 'open'",
        (retry_at, auto_retries, tenant, failure_id),
    )


def retries_scheduled(
    conn: SqlConn, after: tuple[str, str] | None, limit: int
) -> list[Failure]:
    """Open quarantines with an automatic retry scheduled, any tenant, by (tenant, id) after
    `after` (through the partial index of the scheduled ones)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM failures WHERE retry_at IS NOT NULL AND status = 'open'"
        " AND kind = 'quarantine' AND (tenant, id) > (?, ?) ORDER BY tenant, id LIMIT ?",
        (*(after or ("", "")), limit),
    ).fetchall()
    return [failure_from_row(row) for row in rows]


def failure_from_row(row: Any) -> Failure:
    return Failure(
        task_id=row["task_id"],
        tenant=row["tenant"],
        session=row["session"],
        stage=row["stage"],
        error=row["error"],
        raws=tuple(json.loads(row["raws"])),
        failed_at=row["failed_at"],
        id=row["id"],
        kind=FailureKind(row["kind"]),
        status=FailureStatus(row["status"]),
        turn_ids=tuple(json.loads(row["turn_ids"])),
        detail=dict(json.loads(row["detail"])),
        attempts=row["attempts"],
        resolved_at=row["resolved_at"],
        condition=row["condition_key"],
        last_seen_at=row["last_seen_at"],
        retry_at=row["retry_at"],
        auto_retries=row["auto_retries"],
    )
