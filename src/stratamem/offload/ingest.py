"""Ingest: tool pairs appended durably, user messages recorded as task boundaries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from stratamem.domain import Scope, check_ident
from stratamem.errors import InvalidInput
from stratamem.inputs import check_text
from stratamem.offload.results import IngestResult
from stratamem.offload.schedule import Stage, StageTask, l1_timer_key
from stratamem.offload.stage import StageDeps, arm_diagram_timer, derived_id
from stratamem.store.offload.records import Mark, ToolPair
from stratamem.timestamps import check_timestamp

MAX_MARK_CHARS = 20_000


async def ingest_pairs(
    deps: StageDeps, tenant: str, session: str, pairs: Sequence[ToolPair]
) -> IngestResult:
    """Append `pairs`; enqueue offload-l1 at the batch threshold, else arm its timer."""
    check_ident(session, "session")
    appended = await asyncio.to_thread(
        deps.store.append_pairs, Scope(tenant), session, pairs, deps.clock.now()
    )
    task = StageTask(Stage.L1, tenant, session)
    enqueued = appended.pending >= deps.settings.l1_batch
    if enqueued:
        await deps.scheduler.enqueue(task)
    elif appended.pending:
        due = deps.clock.now() + deps.settings.l1_delay_s
        await deps.scheduler.arm(l1_timer_key(tenant, session), task, due)
    return IngestResult(appended.stored, appended.duplicates, appended.pending, enqueued)


async def record_user_message(
    deps: StageDeps,
    tenant: str,
    session: str,
    text: str,
    *,
    message_id: str | None = None,
    timestamp: float | None = None,
) -> str:
    """Record a user message as a task boundary pending judgment and enqueue offload-l15.

    Returns the boundary's id (`message_id` if given, else derived from time and text).
    """
    check_ident(session, "session")
    if not check_text(text, "a user message").strip():
        raise InvalidInput("a user message needs text")
    ts = deps.clock.now() if timestamp is None else check_timestamp(timestamp, "timestamp")
    mark_id = (
        check_ident(message_id, "message id")
        if message_id is not None
        else derived_id("m", repr(ts), text)
    )
    mark = Mark(mark_id, session, ts, text[:MAX_MARK_CHARS], None, judged=False)
    if await asyncio.to_thread(deps.store.add_mark, Scope(tenant), session, mark):
        await deps.scheduler.enqueue(StageTask(Stage.L15, tenant, session, {"mark": mark_id}))
    return mark_id


@dataclass(frozen=True, slots=True)
class Resubmitted:
    pending_pairs: int
    unjudged: tuple[str, ...]
    unmapped: int

    def to_json(self) -> dict[str, object]:
        return {
            "pending_pairs": self.pending_pairs,
            "unjudged": list(self.unjudged),
            "unmapped": self.unmapped,
        }


async def resubmit(deps: StageDeps, tenant: str, session: str) -> Resubmitted:
    """Submit a session's waiting work again (after a dead letter, say): offload-l1 for pending
    pairs, offload-l15 for unjudged boundaries, the diagram timer for unmapped entries. Safe to
    repeat: claims, compare-and-set and judged boundaries make duplicates do nothing."""
    check_ident(session, "session")
    scope = Scope(tenant)
    pending = await asyncio.to_thread(deps.store.pending_pairs, scope, session)
    marks = await asyncio.to_thread(deps.store.unjudged_marks, scope, session)
    if pending:
        await deps.scheduler.enqueue(StageTask(Stage.L1, tenant, session))
    for mark in marks:
        await deps.scheduler.enqueue(StageTask(Stage.L15, tenant, session, {"mark": mark.mark_id}))
    unmapped = await arm_diagram_timer(deps, tenant, session)
    return Resubmitted(pending, tuple(m.mark_id for m in marks), unmapped)
