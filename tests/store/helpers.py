"""Builders of records for store tests."""

from __future__ import annotations

import numpy as np

from stratamem.domain import MemoryRecord, MemoryType, Mode, Role, Turn

T0 = 1_700_000_000.0


def turn(
    turn_id: str, text: str, session: str = "s1", ts: float = T0, tenant: str = "acme"
) -> Turn:
    return Turn(
        id=turn_id,
        tenant=tenant,
        session=session,
        role=Role.USER,
        text=text,
        timestamp=ts,
        speaker="Ann",
    )


def memory(
    memory_id: str,
    content: str,
    tenant: str = "acme",
    mtype: MemoryType = MemoryType.EPISODIC,
    session: str | None = "s1",
    valid_from: float = T0,
    valid_to: float | None = None,
    activity: float | None = None,
) -> MemoryRecord:
    return MemoryRecord(
        id=memory_id,
        tenant=tenant,
        type=mtype,
        content=content,
        source_turn_ids=("t1",),
        session=session,
        activity_start=activity,
        valid_from=valid_from,
        valid_to=valid_to,
        created_at=valid_from,
        updated_at=valid_from,
        mode=Mode.MANUAL,
    )


def unit(seed: int, dim: int = 8) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return vector / np.linalg.norm(vector)
