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
