"""Failure records of the LLM stages, read and retried: what `stratamem failures` and
`/v1/failures` call. The records themselves are described in `stratamem.store.failures.records`.

A retry re-runs, now, what an open record is about:
- a quarantined turn: its extraction again (`LayerService.retry_quarantine`); an accepted reply
  writes its memories and resolves the quarantine in one transaction;
- a failed stage: one L1 batch of the session (also for `L1-reconcile`), L2, L3, offload-l1,
  offload-l15 (for its message) or offload-l2 of the session. A run that commits resolves the
  stage's open failures; a run that finds nothing left to do resolves this record.
A retry that fails leaves the record open (a quarantine keeps the new raw replies; a stage run
records its own failure) and raises the error. `retry_many` retries every open record of a
session, stage or kind at once (`POST /v1/failures/retry`, `stratamem failures retry
--session`). Retries need the LLM endpoint the records came from: they never fall back to the
offline mode.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from stratamem.domain import Scope
from stratamem.errors import ConfigError, InvalidInput, LayerConflict, NotFound, StratamemError
from stratamem.layers.service import LayerService, Run
from stratamem.offload.facade import Offload, StageOutcome
from stratamem.offload.l1_summaries import L1Outcome
from stratamem.offload.l2_diagram import L2Outcome
from stratamem.offload.schedule import Stage
from stratamem.store.failures.records import (
    RETRYABLE,
    Failure,
    FailureKind,
    FailureQuery,
    FailureStatus,
)

_LAYER_STAGES = ("L1", "L1-reconcile", "L2", "L3")


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    """The record as it stands after the retry, and what the re-run did."""

    failure: Failure
    result: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"failure": self.failure.to_json(), "result": self.result}


BULK_RETRY_LIMIT = 100
"""Records one bulk retry re-runs at most (the call answers when all of them ran)."""


@dataclass(slots=True)
class BulkRetry:
    """What a bulk retry did: the ids resolved, still open, skipped (no longer open when their
    turn came) and failed (with the error)."""

    resolved: list[str] = field(default_factory=list)
    still_open: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "retried": len(self.resolved) + len(self.still_open) + len(self.failed),
            "resolved": list(self.resolved),
            "still_open": list(self.still_open),
            "skipped": list(self.skipped),
            "failed": dict(self.failed),
        }


class Failures:
    """The failure records of one store, and their retry through the layers and offload."""

    def __init__(self, layers: LayerService, offload: Offload | None = None) -> None:
        self.layers = layers
        self.offload = offload

    async def list(self, tenant: str, query: FailureQuery | None = None) -> list[Failure]:
        return await asyncio.to_thread(self.layers.layers.list_failures, Scope(tenant), query)

    async def get(self, tenant: str, failure_id: str) -> Failure:
        return await asyncio.to_thread(self.layers.layers.get_failure, Scope(tenant), failure_id)

    async def retry(self, tenant: str, failure_id: str) -> RetryOutcome:
        """Re-run what an open quarantine or stage failure is about (see the module doc)."""
        failure = await self.get(tenant, failure_id)
        if failure.kind not in RETRYABLE:
            where = (
                f"; each of its turns has its own outcome on {failure.detail['outcomes']}"
                " (retry the quarantined ones, re-extract those with nothing to remember)"
                if "outcomes" in failure.detail else ""
            )
            raise InvalidInput(
                f"failure {failure_id!r} is a {failure.kind.value} record: noted for the"
                f" operator, nothing to retry{where}"
            )
        if failure.status is not FailureStatus.OPEN:
            raise LayerConflict(f"failure {failure_id!r} is {failure.status.value} already")
        if self.layers.llm is None:
            raise ConfigError("retrying an LLM stage needs its endpoint: set STRATAMEM_LLM_*")
        run = Run(tenant, f"retry-{failure.id}-{failure.attempts}", failure.session)
        if failure.kind is FailureKind.QUARANTINE:
            result = (await self.layers.retry_quarantine(run, failure)).to_json()
        else:
            result = await self._rerun(run, failure)
        after = await self.get(tenant, failure_id)
        unchanged = after.attempts == failure.attempts  # else the re-run's failure updated it
        if after.status is FailureStatus.OPEN and after.kind is FailureKind.STAGE and unchanged:
            after = await asyncio.to_thread(
                self.layers.layers.resolve_retry, Scope(tenant), failure_id, self.layers.clock.now()
            )
        return RetryOutcome(after, result)

    async def retry_many(
        self,
        tenant: str,
        session: str | None = None,
        stage: str | None = None,
        kind: FailureKind | None = None,
        limit: int = BULK_RETRY_LIMIT,
    ) -> BulkRetry:
        """Retry, one after the other, the tenant's open records that can be retried (of one
        session, stage or kind when given; the oldest first, at most `limit`). A retry that
        fails leaves its record open and is reported with its error; the others go on."""
        if kind is not None and kind not in RETRYABLE:
            raise InvalidInput(f"{kind.value} records are noted for the operator: nothing to retry")
        kinds = [kind] if kind is not None else sorted(RETRYABLE)
        found: list[Failure] = []
        for one in kinds:
            query = FailureQuery(session, stage, one, FailureStatus.OPEN, limit=limit)
            found += await self.list(tenant, query)
        found.sort(key=lambda f: f.failed_at)
        outcome = BulkRetry()
        for failure in found[:limit]:
            try:
                done = await self.retry(tenant, failure.id)
            except (LayerConflict, NotFound):  # resolved meanwhile (by an earlier retry too)
                outcome.skipped.append(failure.id)
                continue
            except StratamemError as exc:
                outcome.failed[failure.id] = f"{type(exc).__name__}: {exc}"
                continue
            target = outcome.resolved if done.failure.status is FailureStatus.RESOLVED else (
                outcome.still_open)  # fmt: skip
            target.append(failure.id)
        return outcome

    async def _rerun(self, run: Run, failure: Failure) -> dict[str, Any]:
        if failure.stage in _LAYER_STAGES:
            return await self._rerun_layer(run, failure.stage)
        if self.offload is None:
            raise ConfigError(f"retrying {failure.stage} needs context offload (a pipeline)")
        if failure.session is None:
            raise InvalidInput(f"failure {failure.id!r} names no session to run it for")
        outcome = await _rerun_offload(self.offload, run.tenant, failure.session, failure)
        return {"stage": failure.stage, **outcome_json(outcome)}

    async def _rerun_layer(self, run: Run, stage: str) -> dict[str, Any]:
        if stage == "L2":
            return (await self.layers.run_l2(run)).to_json()
        if stage == "L3":
            return (await self.layers.run_l3(Run(run.tenant, run.task_id))).to_json()
        return (await self.layers.run_l1(run)).to_json()


async def _rerun_offload(
    offload: Offload, tenant: str, session: str, failure: Failure
) -> StageOutcome:
    if failure.stage == Stage.L1.value:
        return await offload.run_l1(tenant, session)
    if failure.stage == Stage.L15.value:
        mark = failure.detail.get("mark")
        if not isinstance(mark, str):
            raise InvalidInput(f"failure {failure.id!r} names no message to judge again")
        return await offload.run_l15(tenant, session, mark)
    if failure.stage == Stage.L2.value:
        return await offload.run_l2(tenant, session)
    raise InvalidInput(f"failure {failure.id!r} is of an unknown stage {failure.stage!r}")


def outcome_json(outcome: StageOutcome) -> dict[str, Any]:
    """What an offload stage run did, in counts."""
    if isinstance(outcome, L1Outcome):
        return {"claimed": outcome.claimed, "created": len(outcome.created),
                "fallbacks": len(outcome.fallbacks), "released": len(outcome.released)}  # fmt: skip
    if isinstance(outcome, L2Outcome):
        return {"mapped": outcome.mapped, "orphaned": outcome.orphaned,
                "leftover": outcome.leftover}  # fmt: skip
    return {"skipped": outcome.skipped, "task_id": outcome.task_id, "routed": outcome.routed}
