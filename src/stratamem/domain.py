"""Plain typed records of the memory layers. Imports nothing else of stratamem but errors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stratamem.errors import InvalidIdentifier, InvalidInput

_IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,127}$")


def check_ident(value: str, what: str) -> str:
    """Return `value` if it is a safe identifier (tenant, session, call id), else raise.

    Identifiers come from callers and may reach keys, paths and queries: only letters, digits and
    `._:@-` are accepted, 1 to 128 characters, not starting with punctuation.
    """
    if not isinstance(value, str) or not _IDENT.match(value):
        raise InvalidIdentifier(
            f"{what} {value!r} is not valid: use 1-128 letters, digits or ._:@- "
            "(starting with a letter or digit)"
        )
    return value


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MemoryType(StrEnum):
    PERSONA = "persona"
    EPISODIC = "episodic"
    INSTRUCTION = "instruction"


def memory_type(value: MemoryType | str) -> MemoryType:
    """`value` as a memory type, or `InvalidInput` naming the accepted ones."""
    try:
        return MemoryType(value)
    except ValueError as exc:
        allowed = ", ".join(t.value for t in MemoryType)
        raise InvalidInput(f"unknown memory type {value!r} (use one of: {allowed})") from exc


class Layer(StrEnum):
    L0 = "L0"
    L1 = "L1"


class Mode(StrEnum):
    """Which machinery made a derived record."""

    LLM = "llm"
    OFFLINE = "offline"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class Scope:
    """Tenant scope that every store read and write takes."""

    tenant: str

    def __post_init__(self) -> None:
        check_ident(self.tenant, "tenant")


@dataclass(frozen=True, slots=True)
class Message:
    """One message as a caller hands it to capture."""

    role: Role
    text: str
    speaker: str | None = None
    timestamp: float | None = None
    id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Turn:
    """L0: one captured message, verbatim."""

    id: str
    tenant: str
    session: str
    role: Role
    text: str
    timestamp: float
    speaker: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    seq: int = 0


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """L1: one atomic memory with provenance and validity."""

    id: str
    tenant: str
    type: MemoryType
    content: str
    priority: int = 50
    source_turn_ids: tuple[str, ...] = ()
    session: str | None = None
    activity_start: float | None = None
    activity_end: float | None = None
    valid_from: float = 0.0
    valid_to: float | None = None
    superseded_by: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    mode: Mode = Mode.MANUAL
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_current(self) -> bool:
        return self.valid_to is None


@dataclass(frozen=True, slots=True)
class Scene:
    """L2: one theme's consolidated document for a tenant."""

    id: str
    tenant: str
    title: str
    summary: str
    body: str
    heat: float = 0.0
    version: int = 1
    memory_ids: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0
    deleted: bool = False
    mode: Mode = Mode.MANUAL


@dataclass(frozen=True, slots=True)
class Profile:
    """L3: the bounded persona document of a tenant."""

    tenant: str
    body: str
    version: int = 1
    updated_at: float = 0.0
    mode: Mode = Mode.MANUAL


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result, fused from BM25 and vector candidates."""

    id: str
    layer: Layer
    text: str
    session: str | None
    score: float
    timestamp: float | None = None
    speaker: str | None = None
    memory_type: MemoryType | None = None
    source_turn_ids: tuple[str, ...] = ()
    ranks: dict[str, int] = field(default_factory=dict)
    retriever_scores: dict[str, float] = field(default_factory=dict)
    """Each retriever's own score under the keys of `ranks` (`POST /v1/recall/explain`)."""

    def scored(
        self,
        score: float,
        ranks: dict[str, int] | None = None,
        retriever_scores: dict[str, float] | None = None,
    ) -> Hit:
        """This hit with another score (and ranks and retriever scores, when given): what
        `dataclasses.replace` gives, at a third of its cost (a search makes dozens). Every field
        is named here: a new one must be too (`tests/core/test_hit_scored.py`)."""
        return Hit(
            self.id,
            self.layer,
            self.text,
            self.session,
            score,
            self.timestamp,
            self.speaker,
            self.memory_type,
            self.source_turn_ids,
            self.ranks if ranks is None else ranks,
            self.retriever_scores if retriever_scores is None else retriever_scores,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "layer": self.layer.value,
            "text": self.text,
            "session": self.session,
            "score": round(self.score, 6),
            "timestamp": self.timestamp,
            "speaker": self.speaker,
            "type": self.memory_type.value if self.memory_type else None,
            "source_turn_ids": list(self.source_turn_ids),
            "ranks": dict(self.ranks),
        }


@dataclass(frozen=True, slots=True)
class Recall:
    """What to put before a model call: the hits, a per-turn block and a stable block."""

    hits: list[Hit]
    context: str
    stable: str
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "stable": self.stable,
            "hits": [h.to_json() for h in self.hits],
            "stats": self.stats,
        }
