"""The backlog scheduler's queries (`LayerStore` "owed work", `OffloadStore.sessions_owing`),
shared by the SQL stores. Each pages by key with a row-value comparison; the partial indexes
of migrations 13 and 21 (`layers/schema.py`, `offload/schema.py`) hold only the owed rows, so a
page costs what it returns. They need the `session_heads` table (kept by each database's
triggers) and `layer_flush_requests`."""

from __future__ import annotations

from typing import Any

from stratamem.store.layers.port import FlushRequest, SessionState, TenantOwed
from stratamem.store.layers.rows import session_state_from_row
from stratamem.store.offload.records import OffloadOwed
from stratamem.store.sql import SqlConn

_NOWHERE = ("", "")  # sorts before every (tenant, session): identifiers are never empty

_SESSIONS_OWING_L1 = """
SELECT h.tenant AS tenant, h.session AS session, h.last_seq AS last_seq,
       h.last_turn_at AS last_turn_at, h.cursor_seq AS cursor_seq, s.l1_runs AS l1_runs,
       s.last_l1_at AS last_l1_at, s.last_l2_at AS last_l2_at
FROM session_heads h
LEFT JOIN layer_sessions s ON s.tenant = h.tenant AND s.session = h.session
WHERE h.last_seq > h.cursor_seq AND (h.tenant, h.session) > (?, ?)
ORDER BY h.tenant, h.session LIMIT ?
"""

_TENANTS_OWING_L2 = """
SELECT lt.tenant AS tenant, lt.l2_mark AS mark, lt.last_l2_at AS last_run_at,
       (SELECT MAX(m.created_at) FROM memories m WHERE m.tenant = lt.tenant
        AND m.rid > lt.l2_mark) AS changed_at
FROM layer_tenants lt
WHERE lt.tenant > ? AND EXISTS (
    SELECT 1 FROM memories m WHERE m.tenant = lt.tenant AND m.rid > lt.l2_mark)
ORDER BY lt.tenant LIMIT ?
"""

_TENANTS_OWING_L3 = """
SELECT tenant, mark, changed_at, last_run_at FROM (
    SELECT lt.tenant AS tenant, COALESCE(lt.last_l3_at, 0) AS mark, lt.last_l3_at AS last_run_at,
           lt.memories_since_l3 AS since,
           (SELECT MAX(v.created_at) FROM scene_versions v WHERE v.tenant = lt.tenant)
               AS changed_at
    FROM layer_tenants lt WHERE lt.tenant > ?
)
WHERE since >= ? OR (changed_at IS NOT NULL AND changed_at > mark)
ORDER BY tenant LIMIT ?
"""


def sessions_owing_l1(
    conn: SqlConn, after: tuple[str, str] | None, limit: int
) -> list[SessionState]:
    rows = conn.execute(_SESSIONS_OWING_L1, (*(after or _NOWHERE), limit)).fetchall()
    return [session_state_from_row(row) for row in rows]


def tenants_owing_l2(conn: SqlConn, after: str | None, limit: int) -> list[TenantOwed]:
    rows = conn.execute(_TENANTS_OWING_L2, (after or "", limit)).fetchall()
    return [_tenant_owed(r) for r in rows]


def tenants_owing_l3(
    conn: SqlConn, after: str | None, every_memories: int, limit: int
) -> list[TenantOwed]:
    rows = conn.execute(_TENANTS_OWING_L3, (after or "", every_memories, limit)).fetchall()
    return [_tenant_owed(r) for r in rows]


def _tenant_owed(r: Any) -> TenantOwed:
    return TenantOwed(r["tenant"], float(r["mark"]), r["changed_at"], r["last_run_at"])


def request_flush(conn: SqlConn, tenant: str, session: str, now: float) -> None:
    conn.execute(
        "INSERT INTO layer_flush_requests (tenant, session, requested_at) VALUES (?, ?, ?)"
        " ON CONFLICT (tenant, session) DO UPDATE"
        " SET requested_at = CASE WHEN excluded.requested_at > layer_flush_requests.requested_at"
        " THEN excluded.requested_at ELSE layer_flush_requests.requested_at END",
        (tenant, session, now),
    )


def complete_flush(conn: SqlConn, tenant: str, session: str, started_at: float) -> None:
    conn.execute(
        "DELETE FROM layer_flush_requests WHERE tenant = ? AND session = ? AND requested_at <= ?",
        (tenant, session, started_at),
    )


def flush_requests(
    conn: SqlConn, after: tuple[str, str] | None, limit: int
) -> list[FlushRequest]:
    rows = conn.execute(
        "SELECT tenant, session, requested_at FROM layer_flush_requests"
        " WHERE (tenant, session) > (?, ?) ORDER BY tenant, session LIMIT ?",
        (*(after or _NOWHERE), limit),
    ).fetchall()
    return [FlushRequest(r["tenant"], r["session"], r["requested_at"]) for r in rows]


_OFFLOAD_OWED = """
WITH p AS (
    SELECT tenant, session, MIN(received_at) AS pending_at
    FROM offload_pairs
    WHERE done = 0 AND (claim_expires IS NULL OR claim_expires <= ?)
      AND (tenant, session) > (?, ?)
    GROUP BY tenant, session
), m AS (
    SELECT tenant, session, MIN(ts) AS unjudged_at
    FROM offload_marks
    WHERE judged = 0 AND (tenant, session) > (?, ?)
    GROUP BY tenant, session
), e AS (
    SELECT tenant, session, MIN(created_at) AS unmapped_at
    FROM offload_entries
    WHERE task_id IS NOT NULL AND node_id IS NULL AND (tenant, session) > (?, ?)
    GROUP BY tenant, session
), k AS (
    SELECT tenant, session FROM p UNION SELECT tenant, session FROM m
    UNION SELECT tenant, session FROM e ORDER BY 1, 2 LIMIT ?
)
SELECT k.tenant AS tenant, k.session AS session, p.pending_at AS pending_at,
       m.unjudged_at AS unjudged_at, e.unmapped_at AS unmapped_at,
       (SELECT o.mark_id FROM offload_marks o WHERE o.tenant = k.tenant
        AND o.session = k.session AND o.judged = 0 ORDER BY o.ts, o.mark_id LIMIT 1)
           AS unjudged_mark
FROM k LEFT JOIN p ON p.tenant = k.tenant AND p.session = k.session
LEFT JOIN m ON m.tenant = k.tenant AND m.session = k.session
LEFT JOIN e ON e.tenant = k.tenant AND e.session = k.session
ORDER BY k.tenant, k.session
"""


def offload_owed(
    conn: SqlConn, after: tuple[str, str] | None, now: float, limit: int
) -> list[OffloadOwed]:
    tenant, session = after or _NOWHERE
    params = (now, tenant, session, tenant, session, tenant, session, limit)
    return [_offload_owed(r) for r in conn.execute(_OFFLOAD_OWED, params).fetchall()]


def _offload_owed(r: Any) -> OffloadOwed:
    return OffloadOwed(r["tenant"], r["session"], r["pending_at"], r["unjudged_mark"],
                       r["unjudged_at"], r["unmapped_at"])  # fmt: skip
