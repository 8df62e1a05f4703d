"""Failure records as the stages write them (the record set is described in `store.failures`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stratamem.errors import LLMError
from stratamem.llm.errors import LLMCircuitOpen, LLMHTTPError, LLMOutputInvalid
from stratamem.stages.checked import Dropped
from stratamem.store.failures.records import (
    RETRYABLE,
    Failure,
    FailureKind,
    FailureStatus,
    new_failure_id,
)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where records come from: tenant, session, the task that ran, and when."""

    tenant: str
    session: str | None
    task_id: str
    now: float

    def failure(
        self,
        stage: str,
        kind: FailureKind,
        error: str,
        raws: Sequence[str],
        *,
        failure_id: str | None = None,
        turn_ids: Sequence[str] = (),
        detail: Mapping[str, Any] | None = None,
        condition: str = "",
    ) -> Failure:
        """A record: open when its kind can be retried, else noted."""
        status = FailureStatus.OPEN if kind in RETRYABLE else FailureStatus.NOTED
        return Failure(
            self.task_id, self.tenant, self.session, stage, error, tuple(raws), self.now,
            id=failure_id or new_failure_id(), kind=kind, status=status,
            turn_ids=tuple(turn_ids), detail=dict(detail or {}), condition=condition,
        )  # fmt: skip

    def failed(
        self,
        stage: str,
        exc: LLMError,
        kind: FailureKind = FailureKind.STAGE,
        detail: Mapping[str, Any] | None = None,
    ) -> Failure:
        """The record of a call that failed (a stage failure, or a fallback's reason)."""
        return self.failure(stage, kind, reason(exc), raws_of(exc), detail=detail,
                            condition=condition_of(exc))  # fmt: skip

    def dropped(
        self,
        stage: str,
        items: Sequence[Dropped],
        turn_ids: Sequence[str] = (),
        detail: Mapping[str, Any] | None = None,
        kind: FailureKind = FailureKind.ITEM,
    ) -> list[Failure]:
        """Noted records of items dropped from an accepted reply (each item kept as JSON);
        `kind` is `refused` for items that failed the support checks."""
        return [
            self.failure(
                stage,
                kind,
                d.reason,
                (json.dumps(d.item, ensure_ascii=False),),
                turn_ids=turn_ids,
                detail={**(detail or {}), "index": d.index},
            )
            for d in items
        ]


def recordable(exc: LLMError) -> bool:
    """Whether a failed call deserves a failure record: not a call the endpoint's open circuit
    breaker kept from being sent (the failures that opened it were recorded, and the task
    waits without spending attempts, so it would be recorded at every wake-up)."""
    return not isinstance(exc, LLMCircuitOpen)


def condition_of(exc: Exception) -> str:
    """Why a call failed, in a few words: the error's type, and the HTTP status it answered
    (the same condition seen again updates its record: `store.failures.rows`)."""
    if isinstance(exc, LLMHTTPError):
        return f"{type(exc).__name__} {exc.status}"
    return type(exc).__name__


def reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def raws_of(exc: LLMError) -> tuple[str, ...]:
    """The raw replies an error carries: the replies of an unusable output, or the body of an
    HTTP error."""
    if isinstance(exc, LLMOutputInvalid):
        return exc.raws
    if isinstance(exc, LLMHTTPError):
        return (exc.body,)
    return ()
