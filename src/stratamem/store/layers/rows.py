"""Mapping between the layer tables' rows and domain records."""

from __future__ import annotations

import json
from typing import Any

from stratamem.domain import Mode, Profile, Scene
from stratamem.store.layers.port import SessionState, TenantState

SCENE_COLUMNS = (
    "tenant, id, version, title, summary, body, heat, memory_ids, created_at, updated_at,"
    " deleted, mode"
)
PROFILE_COLUMNS = "tenant, version, body, updated_at, mode"


def scene_from_row(row: Any) -> Scene:
    return Scene(
        id=row["id"],
        tenant=row["tenant"],
        title=row["title"],
        summary=row["summary"],
        body=row["body"],
        heat=row["heat"],
        version=row["version"],
        memory_ids=tuple(json.loads(row["memory_ids"])),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        deleted=bool(row["deleted"]),
        mode=Mode(row["mode"]),
    )


def scene_params(scene: Scene) -> tuple[Any, ...]:
    return (
        scene.tenant,
        scene.id,
        scene.version,
        scene.title,
        scene.summary,
        scene.body,
        scene.heat,
        json.dumps(list(scene.memory_ids)),
        scene.created_at,
        scene.updated_at,
        int(scene.deleted),
        scene.mode.value,
    )


def profile_from_row(row: Any) -> Profile:
    return Profile(
        tenant=row["tenant"],
        body=row["body"],
        version=row["version"],
        updated_at=row["updated_at"],
        mode=Mode(row["mode"]),
    )


def session_state_from_row(row: Any) -> SessionState:
    return SessionState(
        tenant=row["tenant"],
        session=row["session"],
        cursor_seq=row["cursor_seq"] or 0,
        last_seq=row["last_seq"] or 0,
        last_turn_at=row["last_turn_at"],
        l1_runs=row["l1_runs"] or 0,
        last_l1_at=row["last_l1_at"],
        last_l2_at=row["last_l2_at"],
    )


def tenant_state_from_row(tenant: str, row: Any | None) -> TenantState:
    if row is None:
        return TenantState(tenant=tenant)
    return TenantState(
        tenant=tenant,
        l2_mark=row["l2_mark"],
        memories_since_l3=row["memories_since_l3"],
        last_l2_at=row["last_l2_at"],
        last_l3_at=row["last_l3_at"],
    )
