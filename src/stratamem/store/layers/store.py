"""`SqlLayerStore`: the `LayerStore` contract beside a SQL store (SQLite or PostgreSQL, `sql.py`).

It borrows the store's connection through `reading()` and `writing(fence)`, so each commit is one
short transaction that also checks the task's fencing token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratamem.domain import MemoryRecord, Profile, Scene, Scope
from stratamem.errors import LayerConflict, NotFound
from stratamem.store.core.port import Fence
from stratamem.store.core.rows import (
    MEMORY_COLUMNS,
    MEMORY_WRITE_COLUMNS,
    memory_from_row,
    memory_params,
)
from stratamem.store.core.scope_tokens import memory_fts_scope
from stratamem.store.evidence import receipt_rows
from stratamem.store.evidence.receipts import COMPLETED, SKIPPED, ReceiptDraft
from stratamem.store.failures import rows as failure_rows
from stratamem.store.failures.records import Failure, FailureQuery
from stratamem.store.layers import ledger
from stratamem.store.layers.ledger import Outcome, TurnOutcome
from stratamem.store.layers.port import (
    Extraction,
    L1Commit,
    L2Commit,
    L3Commit,
    RereadCommit,
    RetryCommit,
    SessionState,
    Supersede,
    TenantState,
)
from stratamem.store.layers.rows import (
    PROFILE_COLUMNS,
    SCENE_COLUMNS,
    profile_from_row,
    scene_from_row,
    scene_params,
    session_state_from_row,
    tenant_state_from_row,
)
from stratamem.store.lineage import rows as lineage_rows
from stratamem.store.lineage.rows import Ref
from stratamem.store.sql import DUPLICATE, SqlConn, SqlStore

MAX_HISTORY = 500
_SESSION_STATE = (
    "SELECT t.tenant AS tenant, t.session AS session, MAX(t.seq) AS last_seq,"
    " MAX(t.ts) AS last_turn_at, s.cursor_seq AS cursor_seq, s.l1_runs AS l1_runs,"
    " s.last_l1_at AS last_l1_at, s.last_l2_at AS last_l2_at"
    " FROM turns t LEFT JOIN layer_sessions s ON s.tenant = t.tenant AND s.session = t.session"
)
#: Every column `_SESSION_STATE` reads unaggregated (PostgreSQL wants them all named).
_STATE_GROUP = "t.tenant, t.session, s.cursor_seq, s.l1_runs, s.last_l1_at, s.last_l2_at"
_MEMORY_MARKS = ", ".join("?" for _ in MEMORY_WRITE_COLUMNS.split(","))
_SCENE_MARKS = ", ".join("?" for _ in SCENE_COLUMNS.split(","))


class SqlLayerStore:
    """Layer records beside a SQL store; shares its connection."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    # -- state -------------------------------------------------------------------------------
    def session_state(self, scope: Scope, session: str) -> SessionState:
        with self._store.reading() as conn:
            row = conn.execute(
                _SESSION_STATE + " WHERE t.tenant = ? AND t.session = ? GROUP BY " + _STATE_GROUP,
                (scope.tenant, session),
            ).fetchone()
        if row is None:
            return SessionState(tenant=scope.tenant, session=session)
        return session_state_from_row(row)

    def pending_turns(self, scope: Scope) -> int:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(t.last_seq - COALESCE(s.cursor_seq, 0)), 0) FROM"
                " (SELECT session, MAX(seq) AS last_seq FROM turns WHERE tenant = ?"
                "  GROUP BY session) t"
                " LEFT JOIN layer_sessions s ON s.tenant = ? AND s.session = t.session"
                " WHERE t.last_seq > COALESCE(s.cursor_seq, 0)",
                (scope.tenant, scope.tenant),
            ).fetchone()
        return int(row[0])

    def last_turn_at(self, scope: Scope) -> float | None:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT MAX(last_turn_at) FROM session_heads WHERE tenant = ?", (scope.tenant,)
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def tenant_state(self, scope: Scope) -> TenantState:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT * FROM layer_tenants WHERE tenant = ?", (scope.tenant,)
            ).fetchone()
        return tenant_state_from_row(scope.tenant, row)

    # -- L1 ----------------------------------------------------------------------------------
    def commit_l1(self, scope: Scope, commit: L1Commit, fence: Fence | None = None) -> None:
        tenant = scope.tenant
        with self._store.writing(fence, key=scope.tenant) as conn:
            _check_cursor(conn, tenant, commit.session, commit.expected_cursor)
            _write_extraction(conn, tenant, commit.extraction, commit.now)
            conn.execute(
                "INSERT INTO layer_sessions (tenant, session, cursor_seq, l1_runs, last_l1_at)"
                " VALUES (?, ?, ?, 1, ?) ON CONFLICT (tenant, session) DO UPDATE SET"
                " cursor_seq = excluded.cursor_seq, l1_runs = layer_sessions.l1_runs + 1,"
                " last_l1_at = excluded.last_l1_at",
                (tenant, commit.session, commit.new_cursor, commit.now),
            )
            for stage in ("L1", "L1-reconcile"):  # reconciliation is part of the L1 run
                failure_rows.resolve_open(conn, tenant, stage, commit.session, commit.now)
            _write_receipt(conn, tenant, commit, "L1")

    def commit_retry(self, scope: Scope, commit: RetryCommit, fence: Fence | None = None) -> None:
        tenant = scope.tenant
        with self._store.writing(fence, key=scope.tenant) as conn:
            failure_rows.resolve_retry(conn, tenant, commit.failure_id, commit.now)
            _write_extraction(conn, tenant, commit.extraction, commit.now)
            _write_receipt(conn, tenant, commit, "L1")

    def commit_reread(
        self, scope: Scope, commit: RereadCommit, fence: Fence | None = None
    ) -> None:
        tenant = scope.tenant
        ids = [o.turn_id for o in commit.extraction.outcomes]
        with self._store.writing(fence, key=scope.tenant) as conn:
            had = ledger.read_outcomes(conn, tenant, commit.session, ids)
            moved = sorted(i for i in ids if i not in had or had[i].outcome != commit.expected)
            if moved:
                raise LayerConflict(
                    f"turns {moved[:5]} of session {commit.session!r} are no longer"
                    f" {commit.expected.value}"
                )
            _write_extraction(conn, tenant, commit.extraction, commit.now)
            _write_receipt(conn, tenant, commit, "L1")

    # -- the turn ledger ---------------------------------------------------------------------
    def turn_outcomes(
        self, scope: Scope, session: str, turn_ids: Sequence[str]
    ) -> dict[str, TurnOutcome]:
        with self._store.reading() as conn:
            return ledger.read_outcomes(conn, scope.tenant, session, turn_ids)

    def outcome_counts(self, scope: Scope, session: str | None = None) -> dict[str, dict[str, int]]:
        with self._store.reading() as conn:
            return ledger.count_outcomes(conn, scope.tenant, session)

    def turns_with_outcome(
        self, scope: Scope, session: str | None, outcome: Outcome, limit: int
    ) -> list[TurnOutcome]:
        with self._store.reading() as conn:
            return ledger.turns_with(conn, scope.tenant, session, outcome, limit)

    def memory_history(self, scope: Scope, memory_id: str) -> list[MemoryRecord]:
        with self._store.reading() as conn:
            found = _linked_versions(conn, scope.tenant, memory_id)
        if not found:
            raise NotFound(f"no memory {memory_id!r} in tenant {scope.tenant!r}")
        return sorted(found.values(), key=lambda m: (m.valid_from, m.created_at, m.id))

    def changed_memories(
        self, scope: Scope, after_mark: int, limit: int
    ) -> tuple[list[MemoryRecord], int]:
        with self._store.reading() as conn:
            rows = conn.execute(
                f"SELECT rid, {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND rid > ?"
                " ORDER BY rid LIMIT ?",
                (scope.tenant, after_mark, limit),
            ).fetchall()
        if not rows:
            return [], after_mark
        current = [memory_from_row(r) for r in rows if r["valid_to"] is None]
        return current, int(rows[-1]["rid"])

    # -- L2 ----------------------------------------------------------------------------------
    def current_scenes(self, scope: Scope) -> list[Scene]:
        with self._store.reading() as conn:
            rows = conn.execute(
                f"SELECT {SCENE_COLUMNS} FROM scene_versions WHERE tenant = ? AND current = 1"
                " AND deleted = 0 ORDER BY heat DESC, created_at, id",
                (scope.tenant,),
            ).fetchall()
        return [scene_from_row(row) for row in rows]

    def newest_scene_at(self, scope: Scope) -> float | None:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT max(updated_at) FROM scene_versions WHERE tenant = ?", (scope.tenant,)
            ).fetchone()
        return None if row[0] is None else float(row[0])

    def scene_history(self, scope: Scope, scene_id: str) -> list[Scene]:
        with self._store.reading() as conn:
            rows = conn.execute(
                f"SELECT {SCENE_COLUMNS} FROM scene_versions WHERE tenant = ? AND id = ?"
                " ORDER BY version",
                (scope.tenant, scene_id),
            ).fetchall()
        if not rows:
            raise NotFound(f"no scene {scene_id!r} in tenant {scope.tenant!r}")
        return [scene_from_row(row) for row in rows]

    def commit_l2(self, scope: Scope, commit: L2Commit, fence: Fence | None = None) -> None:
        tenant = scope.tenant
        with self._store.writing(fence, key=scope.tenant) as conn:
            state = tenant_state_from_row(tenant, _tenant_row(conn, tenant))
            if state.l2_mark != commit.expected_mark:
                raise LayerConflict(
                    f"tenant {tenant!r}: scenes were consolidated up to {state.l2_mark} since"
                    f" this task read {commit.expected_mark}"
                )
            _check_sources(conn, tenant, "memories",
                           [m for scene in commit.scenes for m in scene.memory_ids])  # fmt: skip
            for scene in commit.scenes:
                _write_scene(conn, scene)
            lineage_rows.record_scenes(conn, commit.scenes)
            lineage_rows.clear_stale(conn, tenant, lineage_rows.SCENE,
                                     [s.id for s in commit.scenes])  # fmt: skip
            _ensure_tenant(conn, tenant)
            conn.execute(
                "UPDATE layer_tenants SET l2_mark = ?, last_l2_at = ? WHERE tenant = ?",
                (commit.new_mark, commit.now, tenant),
            )
            if commit.session is not None:
                conn.execute(
                    "INSERT INTO layer_sessions (tenant, session, last_l2_at) VALUES (?, ?, ?)"
                    " ON CONFLICT (tenant, session) DO UPDATE SET last_l2_at = excluded.last_l2_at",
                    (tenant, commit.session, commit.now),
                )
            failure_rows.insert_failures(conn, commit.notes)
            failure_rows.resolve_open(conn, tenant, "L2", None, commit.now)
            _write_receipt(conn, tenant, commit, "L2")

    def stale(self, scope: Scope) -> dict[Ref, str]:
        with self._store.reading() as conn:
            return lineage_rows.stale(conn, scope.tenant)

    # -- L3 ----------------------------------------------------------------------------------
    def profile(self, scope: Scope) -> Profile | None:
        with self._store.reading() as conn:
            row = conn.execute(
                f"SELECT {PROFILE_COLUMNS} FROM profile_versions WHERE tenant = ? AND current = 1",
                (scope.tenant,),
            ).fetchone()
        return None if row is None else profile_from_row(row)

    def profile_history(self, scope: Scope) -> list[Profile]:
        with self._store.reading() as conn:
            rows = conn.execute(
                f"SELECT {PROFILE_COLUMNS} FROM profile_versions WHERE tenant = ? ORDER BY version",
                (scope.tenant,),
            ).fetchall()
        return [profile_from_row(row) for row in rows]

    def commit_l3(self, scope: Scope, commit: L3Commit, fence: Fence | None = None) -> None:
        tenant = scope.tenant
        with self._store.writing(fence, key=scope.tenant) as conn:
            if commit.profile is not None:
                _check_sources(conn, tenant, "memories",
                               [r.id for r in commit.sources if r.kind == lineage_rows.MEMORY])
                _write_profile(conn, commit.profile)
                lineage_rows.record_profile(conn, tenant, commit.profile.version, commit.sources)
            lineage_rows.clear_stale(conn, tenant, lineage_rows.PROFILE, [lineage_rows.PROFILE_ID])
            _ensure_tenant(conn, tenant)
            conn.execute(
                "UPDATE layer_tenants SET memories_since_l3 = 0, last_l3_at = ? WHERE tenant = ?",
                (commit.now if commit.read_at is None else commit.read_at, tenant),
            )
            failure_rows.resolve_open(conn, tenant, "L3", None, commit.now)
            _write_receipt(conn, tenant, commit, "L3")

    # -- failures ----------------------------------------------------------------------------
    def record_failures(self, failures: Sequence[Failure]) -> None:
        with self._store.writing() as conn:
            failure_rows.insert_failures(conn, failures)

    def list_failures(self, scope: Scope, query: FailureQuery | None = None) -> list[Failure]:
        with self._store.reading() as conn:
            return failure_rows.query_failures(conn, scope.tenant, query or FailureQuery())

    def get_failure(self, scope: Scope, failure_id: str) -> Failure:
        with self._store.reading() as conn:
            return failure_rows.get_failure(conn, scope.tenant, failure_id)

    def schedule_retry(
        self, scope: Scope, failure_id: str, retry_at: float | None, auto_retries: int
    ) -> None:
        with self._store.writing() as conn:
            failure_rows.schedule_retry(conn, scope.tenant, failure_id, retry_at, auto_retries)

    def resolve_retry(self, scope: Scope, failure_id: str, now: float) -> Failure:
        with self._store.writing() as conn:
            return failure_rows.resolve_retry(conn, scope.tenant, failure_id, now)

    def note_retry(
        self, scope: Scope, failure_id: str, now: float, error: str, raws: Sequence[str]
    ) -> Failure:
        with self._store.writing() as conn:
            return failure_rows.note_retry(conn, scope.tenant, failure_id, now, error, raws)


def _check_cursor(conn: SqlConn, tenant: str, session: str, expected: int) -> None:
    row = conn.execute(
        "SELECT cursor_seq FROM layer_sessions WHERE tenant = ? AND session = ?",
        (tenant, session),
    ).fetchone()
    cursor = int(row[0]) if row else 0
    if cursor != expected:
        raise LayerConflict(
            f"session {session!r}: the cursor is at {cursor}, not {expected} as this task read"
        )


def _write_extraction(conn: SqlConn, tenant: str, extraction: Extraction, now: float) -> None:
    """What every L1 commit writes: memories, the versions they replace, failure records and
    the turns' outcomes."""
    _insert_memories(conn, tenant, extraction.memories)
    _supersede(conn, tenant, extraction.supersedes, now)
    _bump_tenant(conn, tenant, len(extraction.memories))
    failure_rows.insert_failures(conn, [*extraction.quarantined, *extraction.notes])
    ledger.write_outcomes(conn, tenant, extraction.outcomes)


def _insert_memories(
    conn: SqlConn, tenant: str, memories: Sequence[MemoryRecord]
) -> None:
    for memory in memories:
        if memory.tenant != tenant:
            raise LayerConflict(f"memory {memory.id!r} belongs to another tenant")
    _check_sources(conn, tenant, "turns", [t for m in memories for t in m.source_turn_ids])
    try:
        conn.executemany(
            f"INSERT INTO memories ({MEMORY_WRITE_COLUMNS}) VALUES ({_MEMORY_MARKS})",
            [memory_params(m) for m in memories],
        )
    except DUPLICATE as exc:
        raise LayerConflict(f"a memory of this batch exists already: {exc}") from exc


def _supersede(
    conn: SqlConn, tenant: str, supersedes: Sequence[Supersede], now: float
) -> None:
    for link in supersedes:
        cursor = conn.execute(
            "UPDATE memories SET valid_to = ?, superseded_by = ?, updated_at = ?, fts_scope = ?"
            " WHERE tenant = ? AND id = ? AND valid_to IS NULL",
            (now, link.new_id, now, memory_fts_scope(tenant, now), tenant, link.old_id),
        )
        if cursor.rowcount != 1:
            raise LayerConflict(f"memory {link.old_id!r} is no longer current")
    old_ids = [link.old_id for link in supersedes]
    if old_ids:  # what was built on the old version is rebuilt (`layers/backlog.py`)
        lineage_rows.mark_stale(conn, tenant, old_ids, lineage_rows.CORRECTED, now)


def _check_sources(conn: SqlConn, tenant: str, table: str, ids: Sequence[str]) -> None:
    """`LayerConflict` when a source the stage built on was forgotten since it read it (the
    task runs again on what is left), so nothing is written that outlives its sources."""
    gone = lineage_rows.missing(conn, tenant, table, ids) if ids else []
    if gone:
        raise LayerConflict(f"{table} {', '.join(gone[:5])} were forgotten since this task read"
                            " them")  # fmt: skip


def _tenant_row(conn: SqlConn, tenant: str) -> Any | None:
    row: Any | None = conn.execute(
        "SELECT * FROM layer_tenants WHERE tenant = ?", (tenant,)
    ).fetchone()
    return row


def _ensure_tenant(conn: SqlConn, tenant: str) -> None:
    conn.execute("INSERT INTO layer_tenants (tenant) VALUES (?) ON CONFLICT DO NOTHING", (tenant,))


def _bump_tenant(conn: SqlConn, tenant: str, new_memories: int) -> None:
    _ensure_tenant(conn, tenant)
    conn.execute(
        "UPDATE layer_tenants SET memories_since_l3 = memories_since_l3 + ? WHERE tenant = ?",
        (new_memories, tenant),
    )


def _write_receipt(
    conn: SqlConn,
    tenant: str,
    commit: L1Commit | L2Commit | L3Commit | RetryCommit | RereadCommit,
    kind: str,
) -> None:
    outcome = SKIPPED if commit.result.get("skipped") else COMPLETED
    draft = ReceiptDraft(commit.task_id, kind, commit.now, commit.result, outcome, commit.attempt)
    receipt_rows.write_receipt(conn, tenant, draft)


def _write_scene(conn: SqlConn, scene: Scene) -> None:
    conn.execute(
        "UPDATE scene_versions SET current = 0 WHERE tenant = ? AND id = ? AND current = 1",
        (scene.tenant, scene.id),
    )
    try:
        conn.execute(
            f"INSERT INTO scene_versions ({SCENE_COLUMNS}, current) VALUES ({_SCENE_MARKS}, 1)",
            scene_params(scene),
        )
    except DUPLICATE as exc:
        raise LayerConflict(f"scene {scene.id!r} version {scene.version} exists already") from exc


def _write_profile(conn: SqlConn, profile: Profile) -> None:
    conn.execute(
        "UPDATE profile_versions SET current = 0 WHERE tenant = ? AND current = 1",
        (profile.tenant,),
    )
    try:
        conn.execute(
            f"INSERT INTO profile_versions ({PROFILE_COLUMNS}, current) VALUES (?, ?, ?, ?, ?, 1)",
            (profile.tenant, profile.version, profile.body, profile.updated_at,
             profile.mode.value),
        )  # fmt: skip
    except DUPLICATE as exc:
        raise LayerConflict(f"profile version {profile.version} exists already") from exc


def _linked_versions(
    conn: SqlConn, tenant: str, memory_id: str
) -> dict[str, MemoryRecord]:
    """Walk `superseded_by` links both ways from `memory_id` (bounded)."""
    found: dict[str, MemoryRecord] = {}
    frontier = [memory_id]
    while frontier and len(found) < MAX_HISTORY:
        current = frontier.pop()
        if current in found:
            continue
        rows = conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ?"
            " AND (id = ? OR superseded_by = ?)",
            (tenant, current, current),
        ).fetchall()
        for row in rows:
            record = memory_from_row(row)
            if record.id == current:
                found[current] = record
                if record.superseded_by:
                    frontier.append(record.superseded_by)
            elif record.id not in found:
                frontier.append(record.id)
    return found
