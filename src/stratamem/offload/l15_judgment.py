"""offload-l15: judge a new user message against the session's tasks, then move the boundary.

The LLM call holds no lock. The write is a compare-and-set on the boundary's version (one short
write transaction): when another judgment wrote first, the message is judged again on the new
state (the model asked again only if the prompt it was shown changed), a bounded number of
times, then the task fails and the pipeline retries it.

Messages that arrive together cost one call, not N(N+1)/2: a message followed by a newer one
with nothing between them (no entry, no tool pair waiting for its summary) takes the offline
rule (the active task continues; the first message opens one), and the newest is judged.

A reply is accepted when it finished normally, has exactly the four fields (`continues` and
`new_task` written out, null when unused), names only a task shown and labels a new task with
at least one word; it gets one repair round. A reply still unusable then (truncated, prose …)
gives way to the offline rule (the active task continues; the first message opens a task), so
the stretch of work after the message is routed all the same; the failure is noted (`fallback`,
with the raw replies). A transport failure is recorded and fails the task (the pipeline retries).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from stratamem.domain import Mode, Scope
from stratamem.errors import LLMError, StoreError
from stratamem.llm.errors import LLMOutputInvalid
from stratamem.llm.prompts import load_prompt
from stratamem.offload.offline import shorten, squash
from stratamem.offload.schedule import Stage
from stratamem.offload.stage import StageDeps, arm_diagram_timer, derived_id
from stratamem.stages.checked import Unusable, ask_checked
from stratamem.stages.content import content_problem
from stratamem.stages.envelope import StrictReply
from stratamem.stages.records import Origin, recordable
from stratamem.store.evidence.receipts import Attempt, ReceiptDraft
from stratamem.store.failures.records import Failure, FailureKind
from stratamem.store.offload.port import OffloadStore
from stratamem.store.offload.records import (
    Boundary,
    Decision,
    Diagram,
    Entry,
    JudgmentCommit,
    Mark,
    VersionConflict,
)

STAGE = Stage.L15.value
LABEL_CHARS = 80
_OFFLINE_LABEL_WORDS = 8
_STAGE_LABEL = re.compile(r'\["([^"]{1,60})"\]')
"""Node labels of a diagram: the summary of a task that is not the active one."""


class JudgmentConflict(StoreError):
    """Other judgments kept moving the boundary; the task is retried later."""


class JudgmentReply(StrictReply):
    completed: bool
    continues: str | None
    new_task: str | None
    long_task: bool


@dataclass(frozen=True, slots=True)
class L15Outcome:
    mark_id: str
    skipped: bool
    decision: Decision | None = None
    task_id: str | None = None
    routed: int = 0
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class _View:
    """What one judgment attempt saw."""

    mark: Mark
    boundary: Boundary
    diagrams: list[Diagram]
    recent: list[Mark]
    entries: list[Entry]
    followed: bool = False
    """A newer message follows with nothing between them: only the newest is judged."""


CAS_LOOPS_PER_ATTEMPT = 4
"""A conflict whose prompt did not change (another boundary's offline rule moved the version)
commits the same judgment again without asking the model; such retries are bounded too."""


async def run_l15(
    deps: StageDeps, tenant: str, session: str, mark_id: str, run: Attempt | None = None
) -> L15Outcome:
    """Judge the boundary `mark_id`; re-judge on a compare-and-set conflict. Run by the
    pipeline, the task's receipt is written with the judgment."""
    scope = Scope(tenant)
    origin = Origin(tenant, session, f"{STAGE}:{mark_id}", deps.clock.now())
    judged: tuple[list[dict[str, str]] | None, Decision, list[Failure]] | None = None
    asked = 0  # the model's judgments: only these count toward cas_attempts
    for attempt in range(1, CAS_LOOPS_PER_ATTEMPT * deps.settings.cas_attempts + 1):
        view = await _look(deps, scope, session, mark_id)
        if view.mark.judged:
            return L15Outcome(mark_id, skipped=True, attempts=attempt)
        shown = None if view.followed or deps.llm is None else _messages(view)
        if judged is None or shown is None or judged[0] != shown:
            if shown is not None:
                if asked == deps.settings.cas_attempts:
                    break
                asked += 1
            judged = (shown, *await _judged(deps, view, origin))
        _, decision, notes = judged
        now = deps.clock.now()
        receipt = None
        if run is not None:
            receipt = ReceiptDraft(run.task_id, "offload-l15", now, {"mark": mark_id},
                                   attempt=run)  # fmt: skip
        try:
            commit = JudgmentCommit(mark_id, view.boundary.version, decision,
                                    derived_id("t", session, mark_id), now, receipt)  # fmt: skip
            routed = await asyncio.to_thread(deps.store.apply_decision, scope, session, commit)
        except VersionConflict:
            continue
        if notes:
            await asyncio.to_thread(deps.store.record_failures, notes)
        await arm_diagram_timer(deps, tenant, session)
        return L15Outcome(mark_id, False, decision, routed.task_id, routed.routed, attempt)
    raise JudgmentConflict(
        f"boundary of session {session!r} moved during {asked} judgments"
        f" of {mark_id!r}"
    )


async def _look(deps: StageDeps, scope: Scope, session: str, mark_id: str) -> _View:
    def read() -> _View:
        store = deps.store
        mark = store.get_mark(scope, session, mark_id)
        limit = deps.settings.judgment_messages
        recent = [
            m for m in store.recent_marks(scope, session, mark.timestamp, limit + 1)
            if m.mark_id != mark_id
        ][-limit:]  # fmt: skip
        since = recent[0].timestamp if recent else float("-inf")
        every = store.list_entries(scope, session)
        entries = [e for e in every if since <= e.timestamp < mark.timestamp][-2 * limit :]
        boundary = store.boundary(scope, session)
        return _View(mark, boundary, store.list_diagrams(scope, session), recent, entries,
                     _followed(store, scope, session, mark, boundary, every))  # fmt: skip

    return await asyncio.to_thread(read)


def _followed(
    store: OffloadStore,
    scope: Scope,
    session: str,
    mark: Mark,
    boundary: Boundary,
    entries: Sequence[Entry],
) -> bool:
    """Whether a newer message follows `mark` with no work between them (no entry, and no tool
    pair still waiting for its summary, whose time is not known yet)."""
    newer = [m.timestamp for m in store.unjudged_marks(scope, session)
             if m.timestamp > mark.timestamp]  # fmt: skip
    if boundary.last_mark_ts is not None and boundary.last_mark_ts > mark.timestamp:
        newer.append(boundary.last_mark_ts)
    if not newer or store.pending_pairs(scope, session) > 0:
        return False
    until = min(newer)
    return not any(mark.timestamp <= e.timestamp < until for e in entries)


async def _judged(
    deps: StageDeps, view: _View, origin: Origin
) -> tuple[Decision, list[Failure]]:
    """The judgment, and the failure notes to keep once it is applied."""
    if view.followed:  # the newest message of those that came together is judged
        return offline_decision(view.mark, view.boundary), []
    detail = {"mark": view.mark.mark_id}
    try:
        return await judge(deps, view), []
    except LLMOutputInvalid as exc:
        note = origin.failed(STAGE, exc, FailureKind.FALLBACK, detail)
        return offline_decision(view.mark, view.boundary), [note]
    except LLMError as exc:
        if recordable(exc):
            failure = origin.failed(STAGE, exc, detail=detail)
            await asyncio.to_thread(deps.store.record_failures, [failure])
        raise


async def judge(deps: StageDeps, view: _View) -> Decision:
    """The LLM's judgment (`LLMOutputInvalid` when unusable after its repair round), or the
    offline rule's without an LLM."""
    if deps.llm is None:
        return offline_decision(view.mark, view.boundary)
    shown = {d.task_id for d in view.diagrams}

    def read(reply: JudgmentReply) -> JudgmentReply:
        if reply.continues is not None and reply.continues not in shown:
            raise Unusable(f"`continues` must be one of the task ids shown {sorted(shown)} or null")
        if reply.new_task is not None:
            problem = content_problem(reply.new_task, 1, "`new_task`")
            if problem is not None:
                raise Unusable(f"{problem}; give a short label, or null")
        return reply

    answer = await ask_checked(deps.llm, STAGE, _messages(view), JudgmentReply, read)
    return _decision(answer.value, view.boundary)


def _decision(reply: JudgmentReply, boundary: Boundary) -> Decision:
    label = shorten(squash(reply.new_task or ""), LABEL_CHARS) or None
    continues = reply.continues
    completed = reply.completed and continues != boundary.active_task
    return Decision(
        completed=completed,
        long_task=reply.long_task,
        continues=continues,
        new_label=None if continues is not None else label,
        mode=Mode.LLM,
    )


def offline_decision(mark: Mark, boundary: Boundary) -> Decision:
    """Without an LLM: the first message opens a task labelled by its first words; later
    messages continue the active task."""
    if boundary.active_task is not None:
        return Decision(False, False, boundary.active_task, None, Mode.OFFLINE)
    words = squash(mark.text).split(" ")[:_OFFLINE_LABEL_WORDS]
    label = shorten(" ".join(words), LABEL_CHARS) or "task"
    return Decision(False, False, None, label, Mode.OFFLINE)


def _messages(view: _View) -> list[dict[str, str]]:
    parts = [
        "TASKS\n" + _tasks_block(view.diagrams, view.boundary.active_task),
        "RECENT\n" + _recent_block(view.recent, view.entries),
        "NEW USER MESSAGE\n" + shorten(view.mark.text, 4000),
    ]
    return [
        {"role": "system", "content": load_prompt("offload_l15").text},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _tasks_block(diagrams: Sequence[Diagram], active: str | None) -> str:
    if not diagrams:
        return "(none yet)"
    lines = []
    for d in diagrams:
        flag = " ACTIVE" if d.task_id == active else ""
        lines.append(f"[{d.task_id}] {d.label} ({d.status.value}){flag}")
        if d.task_id == active and d.mermaid:
            lines.append(d.mermaid)
        elif d.mermaid:
            lines.append("  stages: " + ", ".join(_STAGE_LABEL.findall(d.mermaid)[:8]))
    return "\n".join(lines)


def _recent_block(marks: Sequence[Mark], entries: Sequence[Entry]) -> str:
    items = [(m.timestamp, f"- user: {shorten(squash(m.text), 400)}") for m in marks]
    items += [(e.timestamp, f"- tool {e.tool}: {shorten(e.summary, 200)}") for e in entries]
    return "\n".join(text for _, text in sorted(items)) or "(nothing yet)"
