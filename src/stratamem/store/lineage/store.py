"""`SqlLineageStore`: the `LineageStore` contract beside a SQL store (SQLite or PostgreSQL).

A forget (`forget`) is one transaction of the store's `forgetting`: read the tenant's memory
graph, find what goes (`cascade.py`), purge the scene and profile versions built from it, let
the rebuilder write them again, delete the failure records that may quote what went (those of
the forgotten turns and sessions, and every reconciliation, L2 and L3 record written since the
oldest erased memory: their prompts showed it), and delete the sessions' other records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Scene, Scope, Turn
from stratamem.errors import NotFound
from stratamem.store import erasure
from stratamem.store.core import rows as core_rows
from stratamem.store.core.scope_tokens import memory_fts_scope
from stratamem.store.layers.rows import SCENE_COLUMNS, scene_from_row, scene_params
from stratamem.store.lineage import cascade, rows
from stratamem.store.lineage.port import (
    Affected,
    Forget,
    Lineage,
    Rebuilder,
    Rebuilt,
    SceneRebuild,
)
from stratamem.store.lineage.rows import MEMORY, PROFILE, PROFILE_ID, SCENE, TURN, Ref
from stratamem.store.sql import SqlConn, SqlStore


class ForgettingStore(SqlStore, Protocol):
    """What a forget needs of its store besides a connection (`ForgettingStore` has it)."""

    def forgetting(self, tenant: str) -> AbstractContextManager[SqlConn]: ...

    def delete_records(self, conn: Any, tenant: str, layer: Layer, ids: Sequence[str]) -> int: ...

    def forgotten(self, tenant: str) -> None: ...


#: Failure records of these stages showed memories of the whole tenant to the model.
_TENANT_WIDE_STAGES = ("L1-reconcile", "L2", "L3")
_MEMORY_MARKS = ", ".join("?" for _ in core_rows.MEMORY_WRITE_COLUMNS.split(","))
_SCENE_MARKS = ", ".join("?" for _ in SCENE_COLUMNS.split(","))
_NEUTRAL_TITLE = "Memories"


class SqlLineageStore:
    """Lineage records beside a SQL store; shares its connection."""

    def __init__(self, store: ForgettingStore) -> None:
        self._store = store

    # -- reading -----------------------------------------------------------------------------
    def lineage(self, scope: Scope, record: Ref) -> Lineage:
        with self._store.reading() as conn:
            if record.kind == MEMORY:
                return _memory_lineage(conn, scope.tenant, record.id)
            return _version_lineage(conn, scope.tenant, record)

    # -- corrections -------------------------------------------------------------------------
    def mark_stale(self, scope: Scope, memory_ids: Sequence[str], reason: str, now: float) -> int:
        with self._store.writing(key=scope.tenant) as conn:
            return rows.mark_stale(conn, scope.tenant, memory_ids, reason, now)

    # -- forgetting --------------------------------------------------------------------------
    def forget(self, scope: Scope, forget: Forget, rebuild: Rebuilder) -> dict[str, int]:
        tenant = scope.tenant
        with self._store.forgetting(tenant) as conn:
            counts = _Forgetting(self._store, conn, tenant, forget).run(rebuild)
        self._store.forgotten(tenant)
        return counts


class _Forgetting:
    """One forget, inside its transaction."""

    def __init__(self, store: ForgettingStore, conn: SqlConn, tenant: str, forget: Forget) -> None:
        self.store, self.conn, self.tenant, self.forget = store, conn, tenant, forget
        self.other = 0

    def run(self, rebuild: Rebuilder) -> dict[str, int]:
        turns = self._forgotten_turns()
        nodes, created = self._nodes()
        found = cascade.cascade(nodes, turns, self.forget.memory_ids, self.forget.sessions,
                                self._existing_turns(nodes))  # fmt: skip
        erased = [n.id for n in nodes if n.id in found.erased]
        purged_scenes, purged_profiles = self._purged(erased)
        affected = Affected(tenant=self.tenant, now=self.forget.now,
                            rederive=self._rederive(found))  # fmt: skip
        affected = self._scene_rebuilds(affected, purged_scenes, set(erased))
        affected = self._profile_rebuild(affected, purged_profiles, set(erased))
        rebuilt = rebuild(affected)
        memories = self.store.delete_records(self.conn, self.tenant, Layer.L1, erased)
        self._relink(nodes, found, rebuilt)
        self._insert_memories([m for ms in rebuilt.replacements.values() for m in ms])
        self._purge(purged_scenes + purged_profiles)
        self._write_scenes(rebuilt.scenes)
        self._write_profile(rebuilt)
        self._forget_failures(turns, [created[m] for m in erased])
        deleted_turns = self.store.delete_records(self.conn, self.tenant, Layer.L0, turns)
        for session in self.forget.sessions:
            self.other += erasure.erase_session_rest(self.conn, self.tenant, session)
        rederived = sum(len(ms) for ms in rebuilt.replacements.values())
        self._bump(rederived)
        return {
            "turns": deleted_turns, "memories": memories, "other": self.other,
            "rederived": rederived, "purged_versions": len(purged_scenes) + len(purged_profiles),
            "rebuilt": len(rebuilt.scenes) + (rebuilt.profile is not None),
        }  # fmt: skip

    # -- what goes -----------------------------------------------------------------------
    def _forgotten_turns(self) -> list[str]:
        found: dict[str, None] = {}
        for session in self.forget.sessions:
            rows_ = self.conn.execute(
                "SELECT id FROM turns WHERE tenant = ? AND session = ? ORDER BY seq",
                (self.tenant, session),
            ).fetchall()
            found.update((r[0], None) for r in rows_)
        for turn_id in self.forget.turn_ids:
            if self.conn.execute("SELECT 1 FROM turns WHERE tenant = ? AND id = ?",
                                 (self.tenant, turn_id)).fetchone():  # fmt: skip
                found[turn_id] = None
        return list(found)

    def _nodes(self) -> tuple[list[cascade.Node], dict[str, float]]:
        found = self.conn.execute(
            "SELECT id, source_turn_ids, superseded_by, session, valid_to, created_at"
            " FROM memories WHERE tenant = ? ORDER BY rid",
            (self.tenant,),
        ).fetchall()
        nodes = [
            cascade.Node(r[0], tuple(json.loads(r[1])), r[2], r[3], r[4] is None) for r in found
        ]
        return nodes, {r[0]: float(r[5]) for r in found}

    def _existing_turns(self, nodes: Sequence[cascade.Node]) -> set[str]:
        wanted = sorted({t for n in nodes for t in n.turns})
        found: set[str] = set()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            found.update(r[0] for r in self.conn.execute(
                f"SELECT id FROM turns WHERE tenant = ? AND id IN ({marks})", (self.tenant, *chunk)
            ).fetchall())  # fmt: skip
        return found

    def _purged(self, erased: Sequence[str]) -> tuple[list[Ref], list[Ref]]:
        """Scene versions built from an erased memory; profile versions built from one, from
        such a scene version, or from such a profile version."""
        built = rows.built_from(self.conn, self.tenant, MEMORY, erased)
        scenes = [r for r in built if r.kind == SCENE]
        profiles = {r for r in built if r.kind == PROFILE}
        frontier = [Ref(SCENE, r.id, r.version) for r in scenes] + list(profiles)
        while frontier:
            more = rows.built_from_versions(self.conn, self.tenant, frontier)
            frontier = [r for r in more if r.kind == PROFILE and r not in profiles]
            profiles.update(frontier)
        return scenes, sorted(profiles, key=lambda r: r.version)

    # -- what is built again --------------------------------------------------------------
    def _rederive(self, found: cascade.Cascade) -> list[tuple[MemoryRecord, list[Turn]]]:
        out = []
        for memory_id, turn_ids in found.rederive.items():
            memory = core_rows.memory_from_row(self.conn.execute(
                f"SELECT {core_rows.MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND id = ?",
                (self.tenant, memory_id),
            ).fetchone())  # fmt: skip
            marks = ", ".join("?" for _ in turn_ids)
            turns = [core_rows.turn_from_row(r) for r in self.conn.execute(
                f"SELECT {core_rows.TURN_COLUMNS} FROM turns WHERE tenant = ? AND id IN ({marks})"
                " ORDER BY ts, seq", (self.tenant, *turn_ids),
            ).fetchall()]  # fmt: skip
            out.append((memory, turns))
        return out

    def _scene_rebuilds(
        self, affected: Affected, purged: Sequence[Ref], erased: set[str]
    ) -> Affected:
        gone = {(r.id, r.version) for r in purged}
        rebuilds = []
        for scene_id in dict.fromkeys(r.id for r in purged):
            versions = [scene_from_row(r) for r in self.conn.execute(
                f"SELECT {SCENE_COLUMNS} FROM scene_versions WHERE tenant = ? AND id = ?"
                " ORDER BY version", (self.tenant, scene_id),
            ).fetchall()]  # fmt: skip
            current = versions[-1]
            if (current.id, current.version) not in gone or current.deleted:
                continue
            clean = [v for v in versions if (v.id, v.version) not in gone]
            title = current.title if current.mode is Mode.OFFLINE else (
                clean[-1].title if clean else _NEUTRAL_TITLE)  # fmt: skip
            left = self._memories([m for m in current.memory_ids if m not in erased])
            rebuilds.append(SceneRebuild(current, left, title, current.version + 1))
        return replace(affected, scenes=rebuilds)

    def _profile_rebuild(
        self, affected: Affected, purged: Sequence[Ref], erased: set[str]
    ) -> Affected:
        row = self.conn.execute(
            "SELECT version FROM profile_versions WHERE tenant = ? AND current = 1",
            (self.tenant,),
        ).fetchone()
        if row is None or Ref(PROFILE, PROFILE_ID, int(row[0])) not in purged:
            return affected
        newest = self.conn.execute(
            "SELECT max(version) FROM profile_versions WHERE tenant = ?", (self.tenant,)
        ).fetchone()
        found = self.conn.execute(
            f"SELECT {core_rows.MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND valid_to IS NULL"
            " AND type IN (?, ?) ORDER BY rid",
            (self.tenant, MemoryType.PERSONA.value, MemoryType.INSTRUCTION.value),
        ).fetchall()
        left = [m for m in map(core_rows.memory_from_row, found) if m.id not in erased]
        return replace(affected, profile_version=int(newest[0]) + 1, profile_memories=left)

    def _memories(self, ids: Sequence[str]) -> list[MemoryRecord]:
        if not ids:
            return []
        marks = ", ".join("?" for _ in ids)
        found = self.conn.execute(
            f"SELECT {core_rows.MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND id IN ({marks})",
            (self.tenant, *ids),
        ).fetchall()
        by_id = {m.id: m for m in map(core_rows.memory_from_row, found)}
        return [by_id[i] for i in ids if i in by_id]

    # -- writing ---------------------------------------------------------------------------
    def _relink(self, nodes: Sequence[cascade.Node], found: cascade.Cascade,
                rebuilt: Rebuilt) -> None:  # fmt: skip
        """Memories that stay, superseded by one that went: superseded by what was derived
        again in its place, or valid again when nothing was."""
        for node in nodes:
            if node.id in found.erased or node.superseded_by not in found.erased:
                continue
            head = cascade.successor_of(node.id, nodes) or ""
            replacements = rebuilt.replacements.get(head, [])
            if replacements:
                self.conn.execute(
                    "UPDATE memories SET superseded_by = ? WHERE tenant = ? AND id = ?",
                    (replacements[0].id, self.tenant, node.id),
                )
            else:
                self.conn.execute(
                    "UPDATE memories SET superseded_by = NULL, valid_to = NULL, fts_scope = ?,"
                    " updated_at = ? WHERE tenant = ? AND id = ?",
                    (memory_fts_scope(self.tenant, None), self.forget.now, self.tenant, node.id),
                )

    def _insert_memories(self, memories: Sequence[MemoryRecord]) -> None:
        self.conn.executemany(
            f"INSERT INTO memories ({core_rows.MEMORY_WRITE_COLUMNS}) VALUES ({_MEMORY_MARKS})"
            " ON CONFLICT (tenant, id) DO NOTHING",
            [core_rows.memory_params(m) for m in memories],
        )

    def _purge(self, refs: Sequence[Ref]) -> None:
        for ref in refs:
            table, where = (("scene_versions", "id = ? AND ") if ref.kind == SCENE
                            else ("profile_versions", ""))  # fmt: skip
            params = (self.tenant, ref.id, ref.version) if ref.kind == SCENE else (
                self.tenant, ref.version)  # fmt: skip
            self.other += self.conn.execute(
                f"DELETE FROM {table} WHERE tenant = ? AND {where}version = ?", params
            ).rowcount
        rows.forget_derived(self.conn, self.tenant, refs)

    def _write_scenes(self, scenes: Sequence[Scene]) -> None:
        for scene in scenes:
            self.conn.execute(
                "UPDATE scene_versions SET current = 0 WHERE tenant = ? AND id = ?",
                (self.tenant, scene.id),
            )
            self.conn.execute(
                f"INSERT INTO scene_versions ({SCENE_COLUMNS}, current) VALUES ({_SCENE_MARKS}, 1)",
                scene_params(scene),
            )
        rows.record_scenes(self.conn, scenes)
        rows.clear_stale(self.conn, self.tenant, SCENE, [s.id for s in scenes])

    def _write_profile(self, rebuilt: Rebuilt) -> None:
        if rebuilt.profile is None:
            return
        profile = rebuilt.profile
        self.conn.execute(
            "UPDATE profile_versions SET current = 0 WHERE tenant = ?", (self.tenant,)
        )
        self.conn.execute(
            "INSERT INTO profile_versions (tenant, version, body, updated_at, mode, current)"
            " VALUES (?, ?, ?, ?, ?, 1)",
            (self.tenant, profile.version, profile.body, profile.updated_at, profile.mode.value),
        )
        rows.record_profile(self.conn, self.tenant, profile.version, rebuilt.profile_sources)
        rows.clear_stale(self.conn, self.tenant, PROFILE, [PROFILE_ID])

    def _forget_failures(self, turns: Sequence[str], erased_at: Sequence[float]) -> None:
        """Failure records that may quote what went: of a forgotten turn, and of a stage that
        showed the tenant's memories since the oldest erased one was written."""
        gone = set(turns)
        doomed = []
        found = self.conn.execute(
            "SELECT id, turn_ids, stage, failed_at FROM failures WHERE tenant = ?",
            (self.tenant,),
        ).fetchall()
        oldest = min(erased_at, default=None)
        for failure_id, turn_ids, stage, failed_at in found:
            quoted = oldest is not None and stage in _TENANT_WIDE_STAGES and failed_at >= oldest
            if quoted or gone.intersection(json.loads(turn_ids)):
                doomed.append(failure_id)
        self.other += sum(self.conn.execute(
            "DELETE FROM failures WHERE tenant = ? AND id = ?", (self.tenant, failure_id)
        ).rowcount for failure_id in doomed)  # fmt: skip

    def _bump(self, new_memories: int) -> None:
        """Memories derived again count as new for the next L3 (L2 finds them past its mark)."""
        if new_memories:
            self.conn.execute(
                "UPDATE layer_tenants SET memories_since_l3 = memories_since_l3 + ?"
                " WHERE tenant = ?",
                (new_memories, self.tenant),
            )


def _memory_lineage(conn: SqlConn, tenant: str, memory_id: str) -> Lineage:
    row = conn.execute(
        "SELECT source_turn_ids, superseded_by FROM memories WHERE tenant = ? AND id = ?",
        (tenant, memory_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"no memory {memory_id!r} in tenant {tenant!r}")
    sources = [Ref(TURN, t) for t in json.loads(row[0])]
    consumed = conn.execute(
        "SELECT id FROM memories WHERE tenant = ? AND superseded_by = ? ORDER BY rid",
        (tenant, memory_id),
    ).fetchall()
    sources += [Ref(MEMORY, r[0]) for r in consumed]
    derived = [Ref(MEMORY, row[1])] if row[1] else []
    derived += rows.built_from(conn, tenant, MEMORY, [memory_id])
    return Lineage(Ref(MEMORY, memory_id), sources, derived)


def _version_lineage(conn: SqlConn, tenant: str, record: Ref) -> Lineage:
    table, key = (("scene_versions", "id = ?") if record.kind == SCENE
                  else ("profile_versions", "? = ''"))  # fmt: skip
    version = record.version
    if version == 0:
        row = conn.execute(
            f"SELECT version FROM {table} WHERE tenant = ? AND {key} AND current = 1",
            (tenant, record.id),
        ).fetchone()
    else:
        row = conn.execute(
            f"SELECT version FROM {table} WHERE tenant = ? AND {key} AND version = ?",
            (tenant, record.id, version),
        ).fetchone()
    if row is None:
        raise NotFound(f"no {record.kind} {record.id!r} version {version} in tenant {tenant!r}")
    found = Ref(record.kind, record.id, int(row[0]))
    derived = rows.built_from_versions(conn, tenant, [found])
    return Lineage(found, rows.sources_of(conn, tenant, found), derived)
