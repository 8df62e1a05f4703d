"""Request and response bodies of the REST API. Requests refuse unknown fields (a `tenant`, too)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stratamem.domain import Layer, MemoryType
from stratamem.inputs import MAX_NESTING, check_json
from stratamem.retrieval.search import MAX_QUERY_CHARS
from stratamem.timestamps import MAX_TIMESTAMP_S, MIN_TIMESTAMP_S, RANGE_TEXT

Ident = Annotated[str, Field(min_length=1, max_length=128, examples=["s1"])]
Query = Annotated[
    str, Field(min_length=1, max_length=MAX_QUERY_CHARS, examples=["what is my dog's name?"])
]
# Numbers and flags in bodies are strict: `true` is not 1, and "5" is not 5.
K = Annotated[int, Field(strict=True, ge=1, le=100)]
Seconds = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]
Time = Seconds | None
#: When something happened: epoch seconds within `stratamem.timestamps`' range.
Timestamp = Annotated[
    float,
    Field(strict=True, allow_inf_nan=False, ge=MIN_TIMESTAMP_S, le=MAX_TIMESTAMP_S,
          description=f"Epoch seconds, {RANGE_TEXT}."),
]  # fmt: skip
Label = Annotated[str, Field(max_length=200)]


class Strict(BaseModel):
    """A request body: unknown fields, text that is not UTF-8 and deep nesting are refused."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _plain_json(cls, data: Any) -> Any:
        check_json(data, "the request body", MAX_NESTING)  # InvalidInput is a ValueError
        return data


class MessageIn(Strict):
    role: str = Field(
        max_length=32,
        description="user, assistant, system or tool (human, ai and bot are taken as aliases).",
        examples=["user"],
    )
    content: str = Field(description="The message, verbatim.", examples=["I adopted a dog"])
    speaker: str | None = Field(None, max_length=200, description="Who said it (a name).")
    timestamp: Timestamp | str | None = Field(
        None,
        description=f"Epoch seconds or RFC 3339 (`2024-05-08T14:30:00Z`), {RANGE_TEXT};"
        " default now.",
    )
    id: str | None = Field(None, max_length=200, description="Caller's id, for idempotence.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class CaptureIn(Strict):
    session: Ident
    messages: list[MessageIn] = Field(min_length=1, max_length=1000)


class CaptureOut(BaseModel):
    ids: list[str]
    stored: list[str]
    duplicates: list[str]
    skipped_empty: int


class HitOut(BaseModel):
    id: str
    layer: str
    text: str
    session: str | None
    score: float
    timestamp: float | None
    speaker: str | None
    type: str | None
    source_turn_ids: list[str]
    ranks: dict[str, int]


class RecallIn(Strict):
    query: Query
    session: Ident | None = None
    k: K | None = None
    budget_chars: Annotated[int, Field(strict=True, ge=0, le=100_000)] | None = None
    include_turns: Flag = True


class RecallOut(BaseModel):
    context: str = Field(description="The per-turn block of relevant memories.")
    stable: str = Field(description="The stable block (profile, scene index).")
    hits: list[HitOut]
    stats: dict[str, Any]


class SearchConversationsIn(Strict):
    query: Query
    k: K = 10
    sessions: list[Ident] | None = Field(None, max_length=100)
    since: Time = None
    until: Time = None


class SearchMemoriesIn(SearchConversationsIn):
    types: list[MemoryType] | None = None
    as_of: Time = None


class SearchIn(SearchMemoriesIn):
    layers: list[Layer] = Field(
        default_factory=lambda: [Layer.L1, Layer.L0],
        min_length=1,
        max_length=2,
        description="L1 memories, L0 conversation turns, or both, fused into one ranking.",
    )


class HitsOut(BaseModel):
    hits: list[HitOut]


class TurnL1Out(BaseModel):
    outcome: str = Field(
        description="extracted, nothing_to_remember, pending, quarantined, refused, or"
        " unrecorded (settled before the turn ledger existed)."
    )
    memory_ids: list[str] = Field(description="extracted: the memories the turn gave.")
    failure_ids: list[str] = Field(
        description="quarantined: its open record; refused (or extracted in part): the records"
        " of the items refused."
    )
    task_id: str | None = Field(description="The L1 run that settled the turn.")
    at: float | None = Field(description="When it did.")


class TurnOut(BaseModel):
    id: str
    session: str
    seq: int
    role: str
    speaker: str | None
    text: str
    timestamp: float
    metadata: dict[str, Any]
    l1: TurnL1Out | None = Field(None, description="The turn's L1 outcome (the turn ledger).")


class WhoAmIOut(BaseModel):
    tenant: str


class HealthOut(BaseModel):
    status: str
    version: str
    ready: bool
    """False until the embedding model is loaded (`/v1/ready` answers 503 until then)."""


class TenantIn(Strict):
    name: Ident
    label: Label = ""


class TenantOut(BaseModel):
    name: str
    label: str
    created_at: float


class KeyIn(Strict):
    label: Label = ""


class KeyOut(BaseModel):
    key_id: str
    tenant: str
    label: str
    created_at: float
    revoked_at: float | None


class IssuedKeyOut(KeyOut):
    token: str = Field(description="The key: shown once, stored only hashed.")


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


#: Error responses every authenticated route documents.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut} for status in (400, 401, 403, 404, 408, 409, 413, 422, 429)
}


class MemoryIn(Strict):
    content: str = Field(min_length=1, examples=["Prefers answers in metric units"])
    type: MemoryType = MemoryType.PERSONA
    session: Ident | None = None
    priority: int = Field(50, strict=True, ge=0, le=100)
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Kept with the memory (part of its identity)."
    )


class MemoryPatch(Strict):
    content: str | None = Field(None, min_length=1)
    type: MemoryType | None = None
    priority: int | None = Field(None, strict=True, ge=0, le=100)


class MemoryOut(BaseModel):
    id: str
    type: str
    content: str
    priority: int
    source_turn_ids: list[str]
    session: str | None
    activity_start: float | None
    activity_end: float | None
    valid_from: float
    valid_to: float | None
    superseded_by: str | None
    created_at: float
    updated_at: float
    mode: str
    metadata: dict[str, Any] = Field(description="What made it (e.g. `made_by`).")


class SceneOut(BaseModel):
    id: str
    title: str
    summary: str
    body: str
    heat: float
    version: int
    memory_ids: list[str]
    created_at: float
    updated_at: float
    deleted: bool
    mode: str


class ProfileOut(BaseModel):
    body: str
    version: int
    updated_at: float
    mode: str


class CurrentProfileOut(BaseModel):
    profile: ProfileOut | None = Field(description="None until the L3 layer has run.")


class TaskOut(BaseModel):
    id: str
    type: str
    session: str | None
    payload: dict[str, Any]
    attempt: int


class FlushOut(BaseModel):
    queued: TaskOut | None = Field(description="The flush task, when it was queued.")
    result: dict[str, Any] | None = Field(description="What the layers did, with `wait`.")


class ErasedCounts(BaseModel):
    turns: int = Field(description="Turns deleted.")
    memories: int = Field(description="Memories deleted (every version).")
    other: int = Field(description="Other records deleted (layer state, offload records,"
                       " purged scene and profile versions, failure records).")
    rederived: int = Field(0, description="Memories derived again from the turns left.")
    purged_versions: int = Field(0, description="Scene and profile versions purged.")
    rebuilt: int = Field(0, description="Scene and profile versions written again.")


class ErasedOut(BaseModel):
    tenant: str
    session: str | None = Field(description="The erased session; null when the whole tenant was.")
    erased: ErasedCounts


class DeadLetterOut(BaseModel):
    id: str
    task: TaskOut
    error: str
    failed_at: float


class FailureOut(BaseModel):
    id: str
    kind: str = Field(description="quarantine, stage, batch, item or fallback.")
    status: str = Field(description="open (retryable), resolved, or noted (nothing to retry).")
    stage: str = Field(description="L1, L1-reconcile, L2, L3, offload-l1, offload-l15 …")
    session: str | None
    task_id: str
    error: str = Field(description="Why it failed.")
    turn_ids: list[str] = Field(description="The turns it is about (a quarantine: one).")
    detail: dict[str, Any]
    attempts: int = Field(description="How often its condition was seen (and retried).")
    failed_at: float
    last_seen_at: float = Field(description="When its condition was last seen.")
    resolved_at: float | None
    condition: str = Field(description="The condition it stands for (one open record each).")
    retry_at: float | None = Field(
        description="When it is retried by itself next (None: never, or it waits for you)."
    )
    auto_retries: int = Field(description="Automatic retries it had.")
    raws: list[str] = Field(description="The raw replies (text, or JSON as parsed).")


class RetryOut(BaseModel):
    failure: FailureOut = Field(description="The record after the retry.")
    result: dict[str, Any] = Field(description="What the re-run did.")


class BulkRetryOut(BaseModel):
    retried: int = Field(description="Records re-run.")
    resolved: list[str] = Field(description="Ids of the records the retry resolved.")
    still_open: list[str] = Field(description="Ids of the records still open after it.")
    skipped: list[str] = Field(description="Ids no longer open when their turn came.")
    failed: dict[str, str] = Field(description="Id → the error its retry answered.")


class PipelineOut(BaseModel):
    queued: int = Field(description="The caller's tasks queued or running (oldest 10,000 seen).")
    dead_letters: int = Field(description="The caller's dead letters.")
    pending_turns: int = Field(description="Captured turns that L1 has not read yet.")
    turn_outcomes: dict[str, int] = Field(
        default_factory=dict, description="The caller's turns by L1 outcome (the turn ledger)."
    )
    sessions: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="The same, per session."
    )


class RereadIn(Strict):
    limit: int = Field(500, strict=True, ge=1, le=2000, description="The most turns read again.")


class RereadOut(BaseModel):
    turns: int = Field(description="Turns read again.")
    results: list[dict[str, Any]] = Field(description="What each L1 batch did.")
    turn_outcomes: dict[str, int] = Field(description="The turns' outcomes afterwards.")


class ToolPairIn(Strict):
    call_id: str = Field(min_length=1, max_length=128, examples=["call_1"])
    tool: str = Field(min_length=1, max_length=200, examples=["web_search"])
    params: dict[str, Any] = Field(default_factory=dict)
    result: str | None = Field(None, description="The tool's result, verbatim.")
    error: str | None = None
    timestamp: Timestamp | None = None
    duration_ms: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] | None = None


class ToolResultsIn(Strict):
    pairs: list[ToolPairIn] = Field(min_length=1, max_length=500)


class UserMessageIn(Strict):
    text: str = Field(min_length=1, description="The user's message: a possible task boundary.")
    id: str | None = Field(None, max_length=128)
    timestamp: Timestamp | None = None


class CompactIn(Strict):
    messages: list[dict[str, Any]] = Field(
        description=f"Chat messages, OpenAI format (at most {MAX_NESTING} levels of nesting"
        " in the whole body)."
    )
    budget_tokens: int = Field(strict=True, ge=1, le=10_000_000)
