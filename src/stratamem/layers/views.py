"""How records are shown to a model: short aliases instead of long ids, dates with weekdays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stratamem.domain import MemoryRecord, Turn
from stratamem.timestamps import utc_text


def day(timestamp: float | None) -> str:
    return utc_text(timestamp, "%Y-%m-%d", "undated")


def moment(timestamp: float) -> str:
    return utc_text(timestamp, "%Y-%m-%d (%A) %H:%M UTC", "undated")


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Aliases:
    """Alias → real id, for the ids one prompt shows."""

    real: dict[str, str]

    @classmethod
    def of(cls, prefix: str, ids: Sequence[str]) -> Aliases:
        return cls({f"{prefix}{i}": real for i, real in enumerate(ids, start=1)})

    def shown(self) -> frozenset[str]:
        return frozenset(self.real)

    def alias_of(self) -> dict[str, str]:
        return {real: alias for alias, real in self.real.items()}


def turn_line(alias: str, turn: Turn, limit: int) -> str:
    who = turn.speaker or turn.role.value
    return f"[{alias}] {moment(turn.timestamp)} {who} ({turn.role.value}): {clip(turn.text, limit)}"


def memory_line(alias: str, memory: MemoryRecord, limit: int) -> str:
    when = day(memory.activity_start) if memory.activity_start is not None else "undated"
    return f"[{alias}] ({memory.type.value}, {when}) {clip(memory.content, limit)}"
