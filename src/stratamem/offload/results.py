"""What context offload answers the library and the client with: plain records, light to import
(the REST client parses them without loading offload's stages)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stratamem.store.offload.records import Diagram

ChatMessage = dict[str, Any]


class Level(StrEnum):
    NONE = "none"
    MILD = "mild"
    AGGRESSIVE = "aggressive"
    EMERGENCY = "emergency"


@dataclass(frozen=True, slots=True)
class Compaction:
    messages: list[ChatMessage]
    level: Level
    budget_tokens: int
    tokens_before: int
    tokens_after: int
    replaced: tuple[str, ...] = ()
    dropped_messages: int = 0
    diagrams: tuple[str, ...] = ()
    unreferenced: tuple[str, ...] = ()
    """Call ids of results kept although their unit was to be dropped: they have no entry."""

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level.value,
            "budget_tokens": self.budget_tokens,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "fits_budget": self.tokens_after <= self.budget_tokens,
            "replaced": list(self.replaced),
            "dropped_messages": self.dropped_messages,
            "diagrams": list(self.diagrams),
            "unreferenced": list(self.unreferenced),
            "messages": self.messages,
        }


@dataclass(frozen=True, slots=True)
class IngestResult:
    stored: tuple[str, ...]
    duplicates: tuple[str, ...]
    pending: int
    enqueued: bool

    def to_json(self) -> dict[str, object]:
        return {
            "stored": list(self.stored),
            "duplicates": list(self.duplicates),
            "pending": self.pending,
            "enqueued": self.enqueued,
        }


@dataclass(frozen=True, slots=True)
class DiagramsView:
    diagrams: list[Diagram]
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {"diagrams": [d.to_json() for d in self.diagrams], "note": self.note}
