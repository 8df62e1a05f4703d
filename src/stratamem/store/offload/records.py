"""Typed records of context offload: tool pairs, entries, refs, boundaries, task diagrams, and
what the offload store's writes answer (`offload_base.OffloadStore`).

They live below the layers, so every store implementation depends only downward."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stratamem.domain import Mode, check_ident
from stratamem.errors import InvalidInput, StoreError
from stratamem.inputs import check_json
from stratamem.store.evidence.receipts import ReceiptDraft
from stratamem.timestamps import check_timestamp


@dataclass(frozen=True, slots=True)
class ToolPair:
    """One finished tool call as the agent made it: the call, and its result or error."""

    call_id: str
    tool: str
    params: dict[str, Any]
    result: str | None
    timestamp: float
    error: str | None = None
    duration_ms: float | None = None

    def __post_init__(self) -> None:
        check_ident(self.call_id, "call id")
        if not self.tool.strip() or len(self.tool) > 200:
            raise InvalidInput(f"tool name of call {self.call_id!r} must be 1-200 characters")
        if self.result is None and self.error is None:
            raise InvalidInput(f"call {self.call_id!r} has neither a result nor an error")
        check_timestamp(self.timestamp, f"the timestamp of call {self.call_id!r}")
        check_json([self.tool, self.params, self.result, self.error], f"call {self.call_id!r}")

    @property
    def output(self) -> str:
        """The text a model saw: the result, or the error marked as such."""
        if self.error is not None and self.result is None:
            return f"ERROR: {self.error}"
        if self.error is not None:
            return f"{self.result}\nERROR: {self.error}"
        return self.result or ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any], default_ts: float) -> ToolPair:
        """Read a pair from its JSON form (`call_id`, `tool`, `params`, `result`, `error` …)."""
        try:
            params = data.get("params") or {}
            if not isinstance(params, dict):
                raise InvalidInput("params must be a JSON object")
            return cls(
                call_id=str(data["call_id"]),
                tool=str(data["tool"]),
                params=params,
                result=_opt_text(data.get("result")),
                error=_opt_text(data.get("error")),
                timestamp=float(data.get("timestamp") or default_ts),
                duration_ms=_opt_float(data.get("duration_ms")),
            )
        except InvalidInput:
            raise
        except KeyError as exc:
            raise InvalidInput(f"a tool pair needs {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"not a tool pair: {exc}") from exc


def _opt_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class Entry:
    """L1 offload: a tool pair's summary, how well it stands in (0-10), and its ref."""

    session: str
    call_id: str
    tool: str
    summary: str
    score: int
    ref_id: str
    timestamp: float
    result_chars: int
    mode: Mode
    task_id: str | None = None
    node_id: str | None = None
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "call_id": self.call_id,
            "tool": self.tool,
            "summary": self.summary,
            "score": self.score,
            "ref_id": self.ref_id,
            "timestamp": self.timestamp,
            "result_chars": self.result_chars,
            "mode": self.mode.value,
            "task_id": self.task_id,
            "node_id": self.node_id,
        }


@dataclass(frozen=True, slots=True)
class NewEntry:
    """What the L1 stage decided for one pair, before it is stored."""

    pair: ToolPair
    summary: str
    score: int
    mode: Mode


@dataclass(frozen=True, slots=True)
class Ref:
    """The full result of a tool call, kept for exact read-back."""

    ref_id: str
    session: str
    call_id: str
    tool: str
    content: str


class TaskStatus(StrEnum):
    ACTIVE = "active"
    OPEN = "open"
    COMPLETED = "completed"


@dataclass(frozen=True, slots=True)
class Diagram:
    """L2 offload: one task of a session, its label and its Mermaid flowchart."""

    task_id: str
    session: str
    label: str
    status: TaskStatus
    long_task: bool
    mermaid: str
    version: int
    created_at: float
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "session": self.session,
            "label": self.label,
            "status": self.status.value,
            "long_task": self.long_task,
            "mermaid": self.mermaid,
            "version": self.version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class Mark:
    """A task boundary: a user message that starts a stretch of work, judged by L1.5."""

    mark_id: str
    session: str
    timestamp: float
    text: str
    task_id: str | None
    judged: bool


@dataclass(frozen=True, slots=True)
class Boundary:
    """The session's routing state, written by compare-and-set on `version`."""

    session: str
    version: int
    active_task: str | None
    last_mark_ts: float | None


@dataclass(frozen=True, slots=True)
class Decision:
    """A validated L1.5 judgment of one boundary."""

    completed: bool
    long_task: bool
    continues: str | None
    new_label: str | None
    mode: Mode = Mode.LLM


@dataclass(frozen=True, slots=True)
class Claim:
    """Tool pairs claimed by one L1 run; the claim expires after its lease."""

    claim_id: str
    pairs: tuple[ToolPair, ...]
    duplicates: tuple[str, ...] = field(default=())


class OffloadStage(StrEnum):
    """The offload stages, by the name their failure records and tasks carry."""

    L1 = "offload-l1"
    L15 = "offload-l15"
    L2 = "offload-l2"


class VersionConflict(StoreError):
    """A compare-and-set found another version than expected: someone wrote first."""


@dataclass(frozen=True, slots=True)
class Appended:
    stored: tuple[str, ...]
    duplicates: tuple[str, ...]
    pending: int


@dataclass(frozen=True, slots=True)
class OffloadOwed:
    """A session's owed offload work, each part with the time it has waited since (None: none
    of that kind): pending pairs under no live claim (oldest `received_at`), the oldest
    unjudged boundary (its id and time), entries routed to a task and not mapped to a diagram
    node (oldest `created_at`)."""

    tenant: str
    session: str
    pending_at: float | None
    unjudged_mark: str | None
    unjudged_at: float | None
    unmapped_at: float | None


@dataclass(frozen=True, slots=True)
class Routed:
    """What applying a judgment did: the boundary now, and the entries it routed to a task."""

    boundary: Boundary
    task_id: str | None
    routed: int


@dataclass(frozen=True, slots=True)
class ClaimCommit:
    """What a run made of its claim: an entry per settled pair, the ref of each call id, the
    commit time, and the run's receipt (None outside the pipeline). `claim_id` may be one no
    pair holds (entries made outside a claim, by compaction)."""

    claim_id: str
    entries: Sequence[NewEntry]
    ref_ids: Mapping[str, str]
    now: float
    receipt: ReceiptDraft | None = None


@dataclass(frozen=True, slots=True)
class JudgmentCommit:
    """A judgment of mark `mark_id` made on the boundary at `expected_version`: its decision,
    the id a new task takes, the commit time and the run's receipt (None outside the
    pipeline)."""

    mark_id: str
    expected_version: int
    decision: Decision
    new_task_id: str
    now: float
    receipt: ReceiptDraft | None = None


@dataclass(frozen=True, slots=True)
class DiagramWrite:
    """A new Mermaid text for one task, the version it replaces, and call id → node."""

    task_id: str
    mermaid: str
    expected_version: int
    mapping: Mapping[str, str]
