"""The lineage table's rows: written in the layers' commits (`layers/store.py`), read by the
lineage routes and by forgetting (`store.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stratamem.domain import Scene
from stratamem.store.sql import SqlConn

SCENE = "scene"
PROFILE = "profile"
MEMORY = "memory"
TURN = "turn"
#: The id of a tenant's one profile in the lineage table.
PROFILE_ID = ""

_INSERT = (
    "INSERT INTO lineage (tenant, kind, id, version, source_kind, source_id, source_version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True, slots=True)
class Ref:
    """One record: a turn or a memory (`version` 0), a scene version, a profile version."""

    kind: str
    id: str
    version: int = 0

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "id": self.id, "version": self.version}


def record_scenes(conn: SqlConn, scenes: Sequence[Scene]) -> None:
    """Each scene version's memories."""
    conn.executemany(_INSERT, [
        (s.tenant, SCENE, s.id, s.version, MEMORY, memory_id, 0)
        for s in scenes for memory_id in dict.fromkeys(s.memory_ids)
    ])  # fmt: skip


def record_profile(conn: SqlConn, tenant: str, version: int, sources: Iterable[Ref]) -> None:
    """A profile version's sources (memories, scene versions)."""
    conn.executemany(_INSERT, [
        (tenant, PROFILE, PROFILE_ID, version, ref.kind, ref.id, ref.version)
        for ref in dict.fromkeys(sources)
    ])  # fmt: skip


def sources_of(conn: SqlConn, tenant: str, derived: Ref) -> list[Ref]:
    rows = conn.execute(
        "SELECT source_kind, source_id, source_version FROM lineage"
        " WHERE tenant = ? AND kind = ? AND id = ? AND version = ?"
        " ORDER BY source_kind, source_id, source_version",
        (tenant, derived.kind, derived.id, derived.version),
    ).fetchall()
    return [Ref(r[0], r[1], int(r[2])) for r in rows]


def built_from(conn: SqlConn, tenant: str, kind: str, ids: Sequence[str]) -> list[Ref]:
    """The scene and profile versions built from any of the records `ids` of `kind`."""
    found: dict[Ref, None] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ", ".join("?" for _ in chunk)
        rows = conn.execute(
            f"SELECT DISTINCT kind, id, version FROM lineage WHERE tenant = ?"
            f" AND source_kind = ? AND source_id IN ({marks})",
            (tenant, kind, *chunk),
        ).fetchall()
        found.update((Ref(r[0], r[1], int(r[2])), None) for r in rows)
    return sorted(found, key=lambda r: (r.kind, r.id, r.version))


def built_from_versions(conn: SqlConn, tenant: str, sources: Sequence[Ref]) -> list[Ref]:
    """The profile versions built from any of the scene versions `sources`."""
    found: dict[Ref, None] = {}
    for ref in sources:
        rows = conn.execute(
            "SELECT DISTINCT kind, id, version FROM lineage WHERE tenant = ?"
            " AND source_kind = ? AND source_id = ? AND source_version = ?",
            (tenant, ref.kind, ref.id, ref.version),
        ).fetchall()
        found.update((Ref(r[0], r[1], int(r[2])), None) for r in rows)
    return list(found)


def forget_derived(conn: SqlConn, tenant: str, refs: Sequence[Ref]) -> None:
    """The rows of derived records that are purged."""
    conn.executemany(
        "DELETE FROM lineage WHERE tenant = ? AND kind = ? AND id = ? AND version = ?",
        [(tenant, r.kind, r.id, r.version) for r in refs],
    )


CORRECTED = "corrected"
FORGOTTEN = "forgotten"


def mark_stale(
    conn: SqlConn, tenant: str, memory_ids: Sequence[str], reason: str, now: float
) -> int:
    """Mark the current scene versions and the current profile version built from any of
    `memory_ids` as stale for `reason` (a forgotten one stays so); how many were marked."""
    current = [
        ref
        for ref in built_from(conn, tenant, MEMORY, memory_ids)
        if _is_current(conn, tenant, ref)
    ]
    for ref in current:
        conn.execute(
            "INSERT INTO lineage_stale (tenant, kind, id, reason, marked_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant, kind, id) DO UPDATE SET marked_at = excluded.marked_at,"
            " reason = CASE WHEN lineage_stale.reason = 'forgotten' THEN lineage_stale.reason"
            " ELSE excluded.reason END",
            (tenant, ref.kind, ref.id, reason, now),
        )
    return len(current)


def _is_current(conn: SqlConn, tenant: str, ref: Ref) -> bool:
    if ref.kind == SCENE:
        row = conn.execute(
            "SELECT 1 FROM scene_versions WHERE tenant = ? AND id = ? AND version = ?"
            " AND current = 1 AND deleted = 0",
            (tenant, ref.id, ref.version),
        ).fetchone()
    else:
        row = conn.execute(
            "SELECT 1 FROM profile_versions WHERE tenant = ? AND version = ? AND current = 1",
            (tenant, ref.version),
        ).fetchone()
    return row is not None


def stale(conn: SqlConn, tenant: str) -> dict[Ref, str]:
    """The tenant's stale scenes and profile (version 0) and why."""
    rows = conn.execute(
        "SELECT kind, id, reason FROM lineage_stale WHERE tenant = ? ORDER BY kind, id", (tenant,)
    ).fetchall()
    return {Ref(r[0], r[1]): r[2] for r in rows}


def clear_stale(conn: SqlConn, tenant: str, kind: str, ids: Sequence[str]) -> None:
    conn.executemany(
        "DELETE FROM lineage_stale WHERE tenant = ? AND kind = ? AND id = ?",
        [(tenant, kind, i) for i in ids],
    )


_TENANTS_STALE = """
SELECT tenant, MAX(marked_at) AS marked_at, COUNT(*) AS stale FROM lineage_stale
WHERE tenant > ? AND kind = ? GROUP BY tenant ORDER BY tenant LIMIT ?
"""


def tenants_stale(
    conn: SqlConn, kind: str, after: str | None, limit: int
) -> list[tuple[str, float, int]]:
    """Tenants with stale records of `kind`: (tenant, newest mark, how many), by tenant."""
    rows = conn.execute(_TENANTS_STALE, (after or "", kind, limit)).fetchall()
    return [(r[0], float(r[1]), int(r[2])) for r in rows]


def missing(conn: SqlConn, tenant: str, table: str, ids: Iterable[str]) -> list[str]:
    """Those of `ids` the tenant has no row of in `table` (`turns` or `memories`): sources
    a forget erased while a stage was building on them."""
    wanted = sorted(set(ids))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        rows = conn.execute(
            f"SELECT id FROM {table} WHERE tenant = ? AND id IN ({marks})", (tenant, *chunk)
        ).fetchall()
        found.update(r[0] for r in rows)
    return [i for i in wanted if i not in found]
