"""The backlog scheduler's queries: the memory layers' owed work behind their own port
(`BacklogStore`, `SqlBacklogStore`), and context offload's (`OffloadStore.sessions_owing`);
the same SQL on both databases. Each pages by key with a row-value comparison; the partial indexes
of migrations 13 and 21 (`layers/schema.py`, `offload/schema.py`) hold only the owed rows, so a
page costs what it returns. They need the `session_heads` table (kept by each database's
triggers) and `layer_flush_requests`."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from stratamem.domain import Scope
from stratamem.store.failures import rows as failure_rows
from stratamem.store.failures.records import Failure
from stratamem.store.layers.port import SessionState
from stratamem.store.layers.rows import session_state_from_row
from stratamem.store.lineage import rows as lineage_rows
from stratamem.store.offload.records import OffloadOwed, OffloadStage
from stratamem.store.sql import SqlConn, SqlStore


@dataclass(frozen=True, slots=True)
class TenantOwed:
    """A tenant owing L2 or L3: `mark` moves when that work is done (the L2 mark, the time of
    the last L3); `changed_at` is when its newest unconsolidated change was written;
    `last_run_at` when that stage last ran (None: never)."""

    tenant: str
    mark: float
    changed_at: float | None
    last_run_at: float | None = None
    last_turn_at: float | None = None
    """L2: when the tenant's newest turn was said (its quiet counts from the later of this
    and `changed_at`)."""


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """A flush accepted and not completed yet (the newest request per session)."""

    tenant: str
    session: str
    requested_at: float


class BacklogStore(Protocol):
    """The memory layers' owed work, for the backlog scheduler (any tenant, paged by key).

    Each query returns up to `limit` rows whose key is greater than `after` (None: from the
    start), in key order, so a scheduler pages through all owed work with a cursor. Only owed
    rows are returned: a page costs what it returns, whatever the number of idle sessions."""

    def sessions_owing_l1(self, after: tuple[str, str] | None, limit: int) -> list[SessionState]:
        """Sessions (any age) with turns past their cursor; key (tenant, session)."""

    def tenants_owing_l2(self, after: str | None, limit: int) -> list[TenantOwed]:
        """Tenants with memory rows written after their L2 mark; key tenant. `mark` is the L2
        mark, `changed_at` the `created_at` of the newest such memory, `last_run_at` the time
        of the last L2, `last_turn_at` the newest turn's."""

    def tenants_owing_l3(
        self, after: str | None, every_memories: int, limit: int
    ) -> list[TenantOwed]:
        """Tenants with a scene version written after their last L3 read the scenes (or with
        scenes and no L3 yet), or with at least `every_memories` memories since their last L3;
        key tenant. `mark` is the last L3 time (0 if none), `changed_at` the newest scene
        version's time."""

    def tenants_stale(self, kind: str, after: str | None, limit: int) -> list[TenantOwed]:
        """Tenants with stale records of `kind` (`scene` or `profile`: built from a memory
        since corrected or forgotten, `store/lineage`); key tenant. `mark` and `changed_at` are
        the newest marking's time."""

    def request_flush(self, scope: Scope, session: str, now: float) -> None:
        """Record that a flush of `session` was accepted at `now` (kept until completed)."""

    def complete_flush(self, scope: Scope, session: str, started_at: float) -> None:
        """A flush that started at `started_at` caught the session up: forget the requests
        made at or before that time (a later one stays owed)."""

    def flush_requests(self, after: tuple[str, str] | None, limit: int) -> list[FlushRequest]:
        """Flush requests not completed; key (tenant, session)."""

    def retries_scheduled(self, after: tuple[str, str] | None, limit: int) -> list[Failure]:
        """Open quarantined turns with an automatic retry scheduled (`Failure.retry_at`, due
        or not); key (tenant, failure id)."""


class SqlBacklogStore:
    """`BacklogStore` beside a SQL store, sharing its connection."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    def sessions_owing_l1(self, after: tuple[str, str] | None, limit: int) -> list[SessionState]:
        with self._store.reading() as conn:
            return sessions_owing_l1(conn, after, limit)

    def tenants_owing_l2(self, after: str | None, limit: int) -> list[TenantOwed]:
        with self._store.reading() as conn:
            return tenants_owing_l2(conn, after, limit)

    def tenants_owing_l3(
        self, after: str | None, every_memories: int, limit: int
    ) -> list[TenantOwed]:
        with self._store.reading() as conn:
            return tenants_owing_l3(conn, after, every_memories, limit)

    def tenants_stale(self, kind: str, after: str | None, limit: int) -> list[TenantOwed]:
        with self._store.reading() as conn:
            found = lineage_rows.tenants_stale(conn, kind, after, limit)
        return [TenantOwed(tenant, marked_at, marked_at) for tenant, marked_at, _ in found]

    def request_flush(self, scope: Scope, session: str, now: float) -> None:
        with self._store.writing() as conn:
            request_flush(conn, scope.tenant, session, now)

    def complete_flush(self, scope: Scope, session: str, started_at: float) -> None:
        with self._store.writing() as conn:
            complete_flush(conn, scope.tenant, session, started_at)

    def flush_requests(self, after: tuple[str, str] | None, limit: int) -> list[FlushRequest]:
        with self._store.reading() as conn:
            return flush_requests(conn, after, limit)

    def retries_scheduled(self, after: tuple[str, str] | None, limit: int) -> list[Failure]:
        with self._store.reading() as conn:
            return failure_rows.retries_scheduled(conn, after, limit)


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
        AND m.rid > lt.l2_mark) AS changed_at,
       (SELECT MAX(h.last_turn_at) FROM session_heads h WHERE h.tenant = lt.tenant)
           AS last_turn_at
FROM layer_tenants lt
WHERE lt.tenant > ? AND EXISTS (
    SELECT 1 FROM memories m WHERE m.tenant = lt.tenant AND m.rid > lt.l2_mark)
ORDER BY lt.tenant LIMIT ?
"""

_TENANTS_OWING_L3 = """
SELECT tenant, mark, changed_at, last_run_at FROM (
    SELECT lt.tenant AS tenant, COALESCE(lt.last_l3_at, 0) AS mark, lt.last_l3_at AS last_run_at,
           lt.memories_since_l3 AS since,
           (SELECT MAX(v.updated_at) FROM scene_versions v WHERE v.tenant = lt.tenant)
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
    return [replace(_tenant_owed(r), last_turn_at=r["last_turn_at"]) for r in rows]


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


# Context offload's owed work, one part per stage (a CTE of the owed rows of its table, through
# its partial index); a query reads the parts of the stages asked for only.
_OFFLOAD_PARTS: dict[OffloadStage, tuple[str, str, str]] = {
    OffloadStage.L1: ("p", "p.pending_at AS pending_at", """
    SELECT tenant, session, MIN(received_at) AS pending_at
    FROM offload_pairs
    WHERE done = 0 AND (claim_expires IS NULL OR claim_expires <= ?)
      AND (tenant, session) > (?, ?)
    GROUP BY tenant, session"""),
    OffloadStage.L15: ("m", "m.unjudged_at AS unjudged_at, (SELECT o.mark_id FROM offload_marks o"
                       " WHERE o.tenant = k.tenant AND o.session = k.session AND o.judged = 0"
                       " ORDER BY o.ts, o.mark_id LIMIT 1) AS unjudged_mark", """
    SELECT tenant, session, MIN(ts) AS unjudged_at
    FROM offload_marks
    WHERE judged = 0 AND (tenant, session) > (?, ?)
    GROUP BY tenant, session"""),
    OffloadStage.L2: ("e", "e.unmapped_at AS unmapped_at", """
    SELECT tenant, session, MIN(created_at) AS unmapped_at
    FROM offload_entries
    WHERE task_id IS NOT NULL AND node_id IS NULL AND (tenant, session) > (?, ?)
    GROUP BY tenant, session"""),
}
_OFFLOAD_NONE = {OffloadStage.L1: "NULL AS pending_at",
                 OffloadStage.L15: "NULL AS unjudged_at, NULL AS unjudged_mark",
                 OffloadStage.L2: "NULL AS unmapped_at"}  # fmt: skip


def _offload_owed_sql(stages: Sequence[OffloadStage]) -> str:
    parts = [_OFFLOAD_PARTS[s] for s in stages]
    ctes = ", ".join(f"{name} AS ({body}\n)" for name, _, body in parts)
    keys = " UNION ".join(f"SELECT tenant, session FROM {name}" for name, _, _ in parts)
    columns = ", ".join(_OFFLOAD_PARTS[s][1] if s in stages else _OFFLOAD_NONE[s]
                        for s in OffloadStage)  # fmt: skip
    joins = " ".join(f"LEFT JOIN {name} ON {name}.tenant = k.tenant AND {name}.session = k.session"
                     for name, _, _ in parts)  # fmt: skip
    return (f"WITH {ctes}, k AS ({keys} ORDER BY 1, 2 LIMIT ?)"
            f" SELECT k.tenant AS tenant, k.session AS session, {columns}"
            f" FROM k {joins} ORDER BY k.tenant, k.session")  # fmt: skip


def offload_owed(
    conn: SqlConn,
    after: tuple[str, str] | None,
    now: float,
    limit: int,
    stages: Collection[OffloadStage] | None = None,
) -> list[OffloadOwed]:
    """Sessions owing work of `stages` (all when None), only those parts read."""
    chosen = [s for s in OffloadStage if stages is None or s in stages]
    if not chosen:
        return []
    tenant, session = after or _NOWHERE
    params: list[Any] = []
    for stage in chosen:
        params += [now, tenant, session] if stage is OffloadStage.L1 else [tenant, session]
    rows = conn.execute(_offload_owed_sql(chosen), (*params, limit)).fetchall()
    return [_offload_owed(r) for r in rows]


def _offload_owed(r: Any) -> OffloadOwed:
    return OffloadOwed(r["tenant"], r["session"], r["pending_at"], r["unjudged_mark"],
                       r["unjudged_at"], r["unmapped_at"])  # fmt: skip
