"""Failure records of the LLM stages (memory layers and context offload), one record set.

- `quarantine`: a turn L1 could not read after splitting its batch down to it alone; the
  session's cursor moved past it in the same transaction. Open until a retry covers it.
- `stage`: a stage run that failed (endpoint down, timeouts, an unusable L2 / L3 / offload
  reply); the pipeline retries the task. Resolved by the stage's next successful commit for
  the same session (L1, offload stages) or tenant (L2, L3), or by a retry.
- `batch`: a batch whose reply was unusable and was split (its turns are settled by the parts).
- `item`: an item dropped from an accepted reply (the rest of the reply was used).
- `refused`: an item of an accepted reply that failed the support checks (`stages.support`):
  its cited turns do not say it.
- `fallback`: a reply replaced by the offline rule (reconciliation, task judgment).
`batch`, `item`, `refused` and `fallback` records are `noted`: kept for the operator, nothing
to retry.

Every record keeps the raw replies it is about (the reply text, or its JSON as parsed).

An open record stands for one condition (`condition_key`): a stage of a session (or tenant)
failing for one reason (the error's type, with its HTTP status), or one quarantined turn. The
same condition seen again updates it (`attempts`, `last_seen_at`, the latest raw replies), so
retries and postponed runs do not pile up records. `retry_at` is when it is retried by itself
(None: it waits for an operator), `auto_retries` how many automatic retries it had.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class FailureKind(StrEnum):
    QUARANTINE = "quarantine"
    STAGE = "stage"
    BATCH = "batch"
    ITEM = "item"
    REFUSED = "refused"
    FALLBACK = "fallback"


class FailureStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"
    NOTED = "noted"


def new_failure_id() -> str:
    """An opaque id (never a counter shared by tenants)."""
    return f"f_{uuid.uuid4().hex[:24]}"


#: Kinds a retry can re-run.
RETRYABLE = frozenset({FailureKind.QUARANTINE, FailureKind.STAGE})


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure of an LLM stage, with every raw reply kept for an operator."""

    task_id: str
    tenant: str
    session: str | None
    stage: str
    error: str
    raws: tuple[str, ...]
    failed_at: float
    id: str = field(default_factory=new_failure_id)
    kind: FailureKind = FailureKind.STAGE
    status: FailureStatus = FailureStatus.OPEN
    turn_ids: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1
    resolved_at: float | None = None
    condition: str = field(default="", compare=False)
    """Why, in a few words (the error's type, and HTTP status): with the stage, session and
    kind, the condition this record stands for (empty: derived from `error`). Read back, the
    whole key it is stored under (`store.failures.rows.condition_key`)."""
    last_seen_at: float | None = None
    retry_at: float | None = None
    auto_retries: int = 0

    @property
    def seen_at(self) -> float:
        """When the condition was last seen."""
        return self.failed_at if self.last_seen_at is None else self.last_seen_at

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "status": self.status.value,
            "stage": self.stage,
            "session": self.session,
            "task_id": self.task_id,
            "error": self.error,
            "turn_ids": list(self.turn_ids),
            "detail": dict(self.detail),
            "attempts": self.attempts,
            "failed_at": self.failed_at,
            "last_seen_at": self.seen_at,
            "resolved_at": self.resolved_at,
            "condition": self.condition,
            "retry_at": self.retry_at,
            "auto_retries": self.auto_retries,
            "raws": list(self.raws),
        }


@dataclass(frozen=True, slots=True)
class FailureQuery:
    """Which failures to list (all filters optional), newest first, paged."""

    session: str | None = None
    stage: str | None = None
    kind: FailureKind | None = None
    status: FailureStatus | None = None
    limit: int = 50
    offset: int = 0
