"""Pydantic models of what the LLM stages must return. LLM output is untrusted input.

Every id a reply names is checked against the ids its prompt showed: `bind()` makes a subclass
that knows them, so an unknown id fails validation inside the LLM client, which runs its one
repair round and then raises `LLMOutputInvalid` with the raw replies.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, Field, field_validator, model_validator

from stratamem.domain import MemoryType

S = TypeVar("S", bound="BoundSchema")

MAX_CONTENT_CHARS = 1000


class BoundSchema(BaseModel):
    """A reply schema whose validation depends on the ids shown in the prompt."""

    shown: ClassVar[dict[str, frozenset[str]]] = {}

    @classmethod
    def bind(cls: type[S], **shown: frozenset[str]) -> type[S]:
        """A subclass (same name, same JSON schema) that validates against `shown` ids."""
        return type(cls.__name__, (cls,), {"shown": dict(shown), "__module__": cls.__module__})

    @classmethod
    def _allowed(cls, kind: str) -> frozenset[str]:
        return cls.shown.get(kind, frozenset())


def _unknown(named: list[str], allowed: frozenset[str], what: str) -> None:
    missing = sorted(set(named) - allowed)
    if missing:
        raise ValueError(
            f"{what} {missing} were not shown; use only: {sorted(allowed) or 'none'}"
        )


def parse_activity_date(value: str) -> float:
    """Epoch seconds of an ISO date or date-time (UTC when naive); `ValueError` otherwise."""
    text = value.strip()
    if len(text) == 10:
        day = date.fromisoformat(text)
        return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# -- L1 extraction ---------------------------------------------------------------------------
class ExtractedMemory(BaseModel):
    type: MemoryType
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    priority: int = Field(default=50, ge=0, le=100)
    source_turn_ids: list[str] = Field(min_length=1, max_length=50)
    activity_date: str | None = None

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is blank")
        return value.strip()

    @field_validator("activity_date")
    @classmethod
    def _iso_date(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_activity_date(value)  # raises ValueError with the reason
        return value.strip()


class Extraction(BoundSchema):
    """Bound with `turns`: the ids of the new turns."""

    memories: list[ExtractedMemory] = Field(default_factory=list, max_length=200)

    @model_validator(mode="after")
    def _known_turns(self) -> Self:
        named = [t for m in self.memories for t in m.source_turn_ids]
        _unknown(named, self._allowed("turns"), "source_turn_ids")
        return self


# -- L1 reconciliation -----------------------------------------------------------------------
class Decision(BaseModel):
    memory: str
    action: Literal["store", "update", "merge", "skip"]
    targets: list[str] = Field(default_factory=list, max_length=20)
    content: str | None = Field(default=None, max_length=MAX_CONTENT_CHARS)

    @model_validator(mode="after")
    def _shape(self) -> Self:
        if self.action == "update" and len(self.targets) != 1:
            raise ValueError(f"{self.memory}: update names exactly one target")
        if self.action == "merge" and not self.targets:
            raise ValueError(f"{self.memory}: merge names at least one target")
        if self.action in ("update", "merge") and not (self.content or "").strip():
            raise ValueError(f"{self.memory}: {self.action} needs the new content")
        return self


class Reconciliation(BoundSchema):
    """Bound with `memories` (new memory ids) and one `near:<id>` set per new memory."""

    decisions: list[Decision] = Field(default_factory=list, max_length=200)

    @model_validator(mode="after")
    def _known_ids(self) -> Self:
        decided = [d.memory for d in self.decisions]
        _unknown(decided, self._allowed("memories"), "memory ids")
        if len(set(decided)) != len(decided):
            raise ValueError("each new memory may have one decision only")
        targeted: list[str] = []
        for decision in self.decisions:
            if decision.action == "skip":
                continue
            _unknown(decision.targets, self._allowed(f"near:{decision.memory}"), "targets")
            targeted.extend(decision.targets)
        if len(set(targeted)) != len(targeted):
            raise ValueError("an existing memory may be the target of one decision only")
        return self


# -- L2 scenes -------------------------------------------------------------------------------
class SceneOp(BaseModel):
    op: Literal["create", "update", "merge", "delete"]
    scene: str | None = None
    scenes: list[str] = Field(default_factory=list, max_length=20)
    title: str | None = Field(default=None, max_length=200)
    summary: str | None = Field(default=None, max_length=600)
    body: str | None = Field(default=None, max_length=20_000)
    memory_ids: list[str] = Field(default_factory=list, max_length=500)

    @model_validator(mode="after")
    def _shape(self) -> Self:
        if self.op == "create" and not (self.title and self.summary and self.body):
            raise ValueError("create needs title, summary and body")
        if self.op in ("update", "delete") and not self.scene:
            raise ValueError(f"{self.op} needs `scene`")
        if self.op == "merge" and len(set(self.scenes)) != len(self.scenes):
            raise ValueError("merge names each of its `scenes` once")
        if self.op == "merge" and len(self.scenes) < 2:
            raise ValueError("merge needs at least two different `scenes`")
        return self

    def scene_ids(self) -> list[str]:
        """The existing scenes the operation acts on (merge: `scenes`, the first one kept)."""
        if self.op == "merge":
            return list(self.scenes)
        return [self.scene] if self.scene and self.op != "create" else []


class SceneOps(BoundSchema):
    """Bound with `scenes` and `memories` ids; `limit` holds the scene limit as a 1-item set."""

    operations: list[SceneOp] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _known_ids(self) -> Self:
        scenes = self._allowed("scenes")
        _unknown([s for op in self.operations for s in op.scene_ids()], scenes, "scene ids")
        named = [m for op in self.operations for m in op.memory_ids]
        _unknown(named, self._allowed("memories"), "memory ids")
        limit = max((int(v) for v in self._allowed("limit")), default=0)
        if limit and _scene_count(len(scenes), self.operations) > limit:
            raise ValueError(f"the operations leave more than {limit} scenes; merge some")
        return self


def _scene_count(current: int, operations: list[SceneOp]) -> int:
    count = current
    for op in operations:
        if op.op == "create":
            count += 1
        elif op.op == "delete":
            count -= 1
        elif op.op == "merge":
            count -= len(set(op.scenes)) - 1
    return count


# -- L3 profile ------------------------------------------------------------------------------
class ProfileDoc(BaseModel):
    profile: str = Field(min_length=1, max_length=20_000)
