"""Mapping between the turns' and memories' rows (SQLite or PostgreSQL) and domain records."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from stratamem.domain import Hit, Layer, MemoryRecord, MemoryType, Mode, Role, Turn
from stratamem.store.core.scope_tokens import memory_fts_scope

TURN_COLUMNS = "id, tenant, session, seq, role, speaker, text, ts, metadata"
MEMORY_COLUMNS = (
    "id, tenant, type, content, priority, source_turn_ids, session, activity_start, activity_end,"
    " valid_from, valid_to, superseded_by, created_at, updated_at, mode, metadata"
)
#: Columns written by `memory_params`: the record plus its full-text scope.
MEMORY_WRITE_COLUMNS = MEMORY_COLUMNS + ", fts_scope"


def turn_from_row(row: Any) -> Turn:
    return Turn(
        id=row["id"],
        tenant=row["tenant"],
        session=row["session"],
        seq=row["seq"],
        role=Role(row["role"]),
        speaker=row["speaker"],
        text=row["text"],
        timestamp=row["ts"],
        metadata=json.loads(row["metadata"]),
    )


def memory_from_row(row: Any) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        tenant=row["tenant"],
        type=MemoryType(row["type"]),
        content=row["content"],
        priority=row["priority"],
        source_turn_ids=tuple(json.loads(row["source_turn_ids"])),
        session=row["session"],
        activity_start=row["activity_start"],
        activity_end=row["activity_end"],
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        superseded_by=row["superseded_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        mode=Mode(row["mode"]),
        metadata=json.loads(row["metadata"]),
    )


def memory_params(memory: MemoryRecord) -> tuple[Any, ...]:
    return (
        memory.id,
        memory.tenant,
        memory.type.value,
        memory.content,
        memory.priority,
        json.dumps(list(memory.source_turn_ids)),
        memory.session,
        memory.activity_start,
        memory.activity_end,
        memory.valid_from,
        memory.valid_to,
        memory.superseded_by,
        memory.created_at,
        memory.updated_at,
        memory.mode.value,
        json.dumps(memory.metadata, ensure_ascii=False),
        memory_fts_scope(memory.tenant, memory.valid_to),
    )


def hit_from_turn_row(row: Any) -> Hit:
    """A turn's hit (score 0) of a row of `HIT_COLUMNS[Layer.L0]`."""
    return Hit(
        id=row["id"],
        layer=Layer.L0,
        text=row["text"],
        session=row["session"],
        score=0.0,
        timestamp=row["ts"],
        speaker=row["speaker"],
    )


def hit_from_memory_row(row: Any) -> Hit:
    """A memory's hit (score 0; its time: when it happened, else since when it holds) of a
    row of `HIT_COLUMNS[Layer.L1]`."""
    start = row["activity_start"]
    return Hit(
        id=row["id"],
        layer=Layer.L1,
        text=row["content"],
        session=row["session"],
        score=0.0,
        timestamp=start if start is not None else row["valid_from"],
        memory_type=MemoryType(row["type"]),
        source_turn_ids=tuple(json.loads(row["source_turn_ids"])),
    )


#: Per layer: the columns a hit shows, their table, and the hit made of such a row.
HIT_COLUMNS: dict[Layer, tuple[str, str, Callable[[Any], Hit]]] = {
    Layer.L0: ("id, session, speaker, text, ts", "turns", hit_from_turn_row),
    Layer.L1: (
        "id, content, session, activity_start, valid_from, type, source_turn_ids",
        "memories",
        hit_from_memory_row,
    ),
}
