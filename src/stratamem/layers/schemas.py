"""What the LLM stages of the memory layers must return. LLM output is untrusted input.

Each reply is a strict envelope (`stages.envelope`): exactly its top-level keys, each required,
so a wrong key or a missing list is an error the client repairs, never "nothing to do". Its
items are checked one by one by the `check_*` functions here, against what the prompt showed
(`Shown`): types and bounds, every id named, the minimum-content rule (`stages.content`). An
invalid item raises `ValidationError` or `Unusable` and is dropped by the stage, not the batch.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator

from stratamem.domain import MemoryType
from stratamem.stages.checked import Unusable
from stratamem.stages.content import content_problem
from stratamem.stages.envelope import StrictReply, array_of
from stratamem.timestamps import RANGE_TEXT, in_range

MAX_CONTENT_CHARS = 1000
MAX_PROFILE_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class Shown:
    """The ids one prompt showed, by kind, and the least words a text must have."""

    ids: dict[str, frozenset[str]] = field(default_factory=dict)
    min_words: int = 2

    def allowed(self, kind: str) -> frozenset[str]:
        return self.ids.get(kind, frozenset())


def require_shown(named: list[str], allowed: Set[str], what: str) -> None:
    missing = sorted(set(named) - allowed)
    if missing:
        raise Unusable(f"{what} {missing} were not shown; use only: {sorted(allowed) or 'none'}")


def require_content(
    text: str | None, shown: Shown, what: str, min_words: int | None = None
) -> None:
    least = shown.min_words if min_words is None else min_words
    problem = content_problem(text or "", least, what)
    if problem is not None:
        raise Unusable(problem)


def parse_activity_date(value: str) -> float:
    """Epoch seconds of an ISO date or date-time (UTC when naive) within the accepted range
    (`stratamem.timestamps`); `ValueError` otherwise."""
    text = value.strip()
    if len(text) == 10:
        day = date.fromisoformat(text)
        seconds = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
    else:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = moment.timestamp()
    if not in_range(seconds):
        raise ValueError(f"{text} is outside {RANGE_TEXT}")
    return seconds


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


class Extraction(StrictReply):
    memories: Annotated[list[Any], array_of(ExtractedMemory)]


def check_memory(raw: Any, shown: Shown) -> ExtractedMemory:
    """One extracted memory; `shown` holds the `turns` (aliases of the NEW turns)."""
    item = ExtractedMemory.model_validate(raw)
    require_shown(item.source_turn_ids, shown.allowed("turns"), "source_turn_ids")
    require_content(item.content, shown, "content")
    return item


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


class Reconciliation(StrictReply):
    decisions: Annotated[list[Any], array_of(Decision)]


class DecisionChecker:
    """Checks decisions in order; `shown` holds `memories` (new ids) and one `near:<id>` set
    per new memory. A memory decided twice, or an existing one targeted twice, is refused."""

    def __init__(self, shown: Shown) -> None:
        self.shown = shown
        self.decided: set[str] = set()
        self.targeted: set[str] = set()

    def __call__(self, raw: Any) -> Decision:
        item = Decision.model_validate(raw)
        require_shown([item.memory], self.shown.allowed("memories"), "memory ids")
        if item.memory in self.decided:
            raise Unusable(f"{item.memory} has a decision already")
        targets = [] if item.action == "skip" else item.targets
        require_shown(targets, self.shown.allowed(f"near:{item.memory}"), "targets")
        if self.targeted.intersection(targets):
            raise Unusable(f"{sorted(self.targeted.intersection(targets))} are targeted already")
        if item.action in ("update", "merge"):
            require_content(item.content, self.shown, "content")
        self.decided.add(item.memory)
        self.targeted.update(targets)
        return item


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


class SceneOps(StrictReply):
    operations: Annotated[list[Any], array_of(SceneOp)]


def check_scene_op(raw: Any, shown: Shown) -> SceneOp:
    """One operation; `shown` holds `scenes` and `memories` aliases. A title and a summary need
    one word, a body the minimum content."""
    item = SceneOp.model_validate(raw)
    require_shown(item.scene_ids(), shown.allowed("scenes"), "scene ids")
    require_shown(item.memory_ids, shown.allowed("memories"), "memory ids")
    for text, what in ((item.title, "title"), (item.summary, "summary")):
        if text is not None:
            require_content(text, shown, what, min_words=1)
    if item.body is not None:
        require_content(item.body, shown, "body")
    return item


def scene_count(current: int, operations: list[SceneOp]) -> int:
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
class ProfileDoc(StrictReply):
    profile: str


def check_profile(reply: ProfileDoc, shown: Shown) -> str:
    """The profile text, if it passes the minimum content and stays within bounds."""
    body = reply.profile.strip()
    require_content(body, shown, "profile")
    if len(body) > MAX_PROFILE_CHARS:
        raise Unusable(f"the profile has {len(body)} characters, more than {MAX_PROFILE_CHARS}")
    return body
