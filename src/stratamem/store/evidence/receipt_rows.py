"""Receipts (`layer_receipts`, every task type's) and the keys that sign them, on either
database (`store/sql.py`)."""

from __future__ import annotations

import json
import secrets
import uuid

from stratamem.errors import LayerConflict
from stratamem.store.evidence import executions
from stratamem.store.evidence.receipts import Attempt, Receipt, ReceiptDraft, mac, verifies
from stratamem.store.sql import DUPLICATE, SqlConn


def write_receipt(conn: SqlConn, tenant: str, draft: ReceiptDraft) -> None:
    """Sign and insert `draft` (inside the caller's write transaction); `LayerConflict` if the
    task id has a receipt already, `StaleFencingToken` if its execution was fenced meanwhile
    (`store.executions`: a later execution of the task or its lock started)."""
    if draft.attempt is not None:
        executions.committed(conn, tenant, draft.attempt, draft.finished_at)
    key_id, secret = _signing_key(conn, draft.finished_at)
    attempt = None if draft.attempt is None else json.dumps(draft.attempt.to_json())
    try:
        conn.execute(
            "INSERT INTO layer_receipts (tenant, task_id, kind, completed_at, result, outcome,"
            " attempt, key_id, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (tenant, draft.task_id, draft.kind, draft.finished_at,
             json.dumps(draft.result, ensure_ascii=False), draft.outcome, attempt, key_id,
             mac(secret, tenant, draft)),
        )  # fmt: skip
    except DUPLICATE as exc:
        raise LayerConflict(f"task {draft.task_id!r} has committed already") from exc


def read_receipt(conn: SqlConn, tenant: str, task_id: str) -> Receipt | None:
    """The receipt of `task_id`, verified against the key that signed it (if not retired)."""
    row = conn.execute(
        "SELECT r.task_id, r.kind, r.completed_at, r.result, r.outcome, r.attempt, r.mac,"
        " k.secret FROM layer_receipts r LEFT JOIN receipt_keys k"
        " ON k.id = r.key_id AND k.retired_at IS NULL WHERE r.tenant = ? AND r.task_id = ?",
        (tenant, task_id),
    ).fetchone()
    if row is None:
        return None
    attempt = None if row[5] is None else Attempt.from_json(json.loads(row[5]))
    draft = ReceiptDraft(row[0], row[1], row[2], json.loads(row[3]), row[4], attempt)
    authentic = verifies(row[7], tenant, draft, row[6])
    return Receipt(draft.task_id, draft.kind, draft.finished_at, draft.result, draft.outcome,
                   attempt, authentic)  # fmt: skip


def rotate_key(conn: SqlConn, now: float, retire_old: bool) -> str:
    """Add a new signing key (inside the caller's write transaction); with `retire_old`, the
    earlier keys stop verifying. Returns the new key's id."""
    if retire_old:
        conn.execute("UPDATE receipt_keys SET retired_at = ? WHERE retired_at IS NULL", (now,))
    return _new_key(conn, now)[0]


def _signing_key(conn: SqlConn, now: float) -> tuple[str, bytes]:
    """The newest live key, created on first use."""
    row = conn.execute(
        "SELECT id, secret FROM receipt_keys WHERE retired_at IS NULL"
        " ORDER BY created_at DESC, rowid DESC LIMIT 1"
    ).fetchone()
    if row is not None:
        return str(row[0]), bytes(row[1])
    return _new_key(conn, now)


def _new_key(conn: SqlConn, now: float) -> tuple[str, bytes]:
    key_id, secret = f"rk_{uuid.uuid4().hex[:16]}", secrets.token_bytes(32)
    conn.execute(
        "INSERT INTO receipt_keys (id, secret, created_at) VALUES (?, ?, ?)",
        (key_id, secret, now),
    )
    return key_id, secret
