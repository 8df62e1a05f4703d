"""Records passed between the layer stages (not stored as such)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stratamem.domain import MemoryType, Mode


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory an extractor proposes, before reconciliation gives it an id."""

    type: MemoryType
    content: str
    priority: int
    source_turn_ids: tuple[str, ...]
    activity_start: float | None = None
    said_at: float | None = None
    """When its earliest cited turn was said: a new memory is valid from then, not from when it
    was extracted."""


class Action(StrEnum):
    STORE = "store"
    UPDATE = "update"
    MERGE = "merge"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What to do with the new memory at `index`; `targets` are real memory ids."""

    index: int
    action: Action
    targets: tuple[str, ...] = ()
    content: str | None = None


@dataclass(frozen=True, slots=True)
class StageResult:
    """What one stage run did; `skipped` when there was nothing to do or it had run already."""

    stage: str
    mode: Mode
    changed: bool = False
    skipped: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "mode": self.mode.value,
            "changed": self.changed,
            "skipped": self.skipped,
            "counts": dict(self.counts),
        }

    @classmethod
    def replay(cls, data: dict[str, Any]) -> StageResult:
        """The result a committed run recorded in its receipt, marked as replayed."""
        return cls(
            stage=str(data["stage"]),
            mode=Mode(data["mode"]),
            changed=bool(data["changed"]),
            skipped=bool(data["skipped"]),
            counts={str(k): int(v) for k, v in dict(data.get("counts", {})).items()},
            replayed=True,
        )


def stable_id(prefix: str, *parts: object) -> str:
    """A deterministic id: the same task re-run after a crash names its records the same."""
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=12)
    return f"{prefix}_{digest.hexdigest()}"


@dataclass(frozen=True, slots=True)
class FlushResult:
    l1: list[StageResult] = field(default_factory=list)
    l2: StageResult | None = None
    l3: StageResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "l1": [r.to_json() for r in self.l1],
            "l2": None if self.l2 is None else self.l2.to_json(),
            "l3": None if self.l3 is None else self.l3.to_json(),
        }
