"""offload-l2: keep each task's Mermaid diagram, with every tool call mapped to a node.

Runs under the session's diagram lock (its writes carry the fence). First, entries unmapped for
longer than the orphan age get the task's orphan node, without the LLM, so nothing waits
forever. Then, per task, the LLM rewrites the diagram or replaces line ranges and maps the new
calls; the result is validated (Mermaid, size bounds, every call id and node it names) and
stored by compare-and-set. Calls it left unmapped re-arm the timer.

Each diagram stands alone: one whose reply stays unusable (after its repair round) is recorded
as a failure and retried on its own timer (`diagram_timer_key`: after `RETRY_DELAYS_S`, a task
narrowed to it), while the others are asked for and saved; the task itself succeeds, so no bad
diagram dead-letters its session. Endpoint trouble (no answer at all) still fails the task: it
would fail every diagram alike. A task narrowed to `{"orphans": true}` (the backlog scheduler's
fallback for a parked session) only gives old entries the orphan node.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field

from stratamem.domain import Scope
from stratamem.errors import LLMError
from stratamem.llm.base import LLM
from stratamem.llm.errors import LLMOutputInvalid
from stratamem.llm.prompts import load_prompt
from stratamem.offload import mermaid
from stratamem.offload.offline import NEEDS_LLM, shorten
from stratamem.offload.schedule import Stage, StageTask, l2_timer_key
from stratamem.offload.stage import StageDeps
from stratamem.stages.checked import Dropped, Unusable, ask_checked, check_items, require_kept
from stratamem.stages.envelope import StrictReply, array_of
from stratamem.stages.records import Origin, recordable
from stratamem.store.core.port import Fence
from stratamem.store.evidence.receipts import Attempt, ReceiptDraft
from stratamem.store.failures.records import Failure
from stratamem.store.offload.records import Diagram, DiagramWrite, Entry

STAGE = Stage.L2.value
ORPHAN_NODE = "orphans"
ORPHAN_LINE = f'{ORPHAN_NODE}["unmapped tool calls"]'
MAX_CALLS_PER_PROMPT = 40
RETRY_DELAYS_S = (60.0, 300.0, 1800.0, 3600.0)
"""When a diagram whose reply was unusable is asked for again, by its failures so far (the last
delay repeats)."""
DIAGRAM = "diagram"
FAILURES = "failures"
ORPHANS = "orphans"


@dataclass(frozen=True, slots=True)
class L2Scope:
    """What one offload-l2 task covers: every diagram of the session, one diagram (its retry,
    with the failures it had so far), or only the orphan fallback."""

    diagram: str | None = None
    failures: int = 0
    orphans_only: bool = False

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> L2Scope:
        diagram = payload.get(DIAGRAM)
        failures = payload.get(FAILURES, 0)
        return cls(diagram if isinstance(diagram, str) else None,
                   failures if isinstance(failures, int) and failures > 0 else 0,
                   payload.get(ORPHANS) is True)  # fmt: skip


def diagram_timer_key(tenant: str, session: str, task_id: str) -> str:
    """The retry timer of one diagram (identifiers cannot contain `/`)."""
    return f"offload-l2/{tenant}/{session}/{task_id}"


def retry_delay_s(failures: int) -> float:
    return RETRY_DELAYS_S[min(max(failures, 1), len(RETRY_DELAYS_S)) - 1]


class EditItem(BaseModel):
    start: int = Field(ge=1)
    end: int = Field(ge=0)
    lines: list[str]


class MapItem(BaseModel):
    call_id: str
    node: str


class DiagramReply(StrictReply):
    rewrite: str | None
    edits: Annotated[list[EditItem], array_of(EditItem)]
    mapping: Annotated[list[Any], array_of(MapItem)]


@dataclass(frozen=True, slots=True)
class L2Outcome:
    mapped: int = 0
    orphaned: int = 0
    leftover: int = 0
    tasks: tuple[str, ...] = ()
    note: str | None = None


async def run_l2(
    deps: StageDeps,
    tenant: str,
    session: str,
    fence: Fence | None = None,
    attempt: Attempt | None = None,
    scope_of_task: L2Scope | None = None,
) -> L2Outcome:
    """One offload-l2 run for a session (offline: nothing, and says diagrams need the LLM).
    Run by the pipeline, its receipt is written last, alone, under `fence` (each diagram is
    its own commit)."""
    llm, narrowed = deps.llm, scope_of_task or L2Scope()
    if llm is None:
        return L2Outcome(note=NEEDS_LLM)
    scope = Scope(tenant)
    orphaned = await _orphan_old(deps, scope, session, fence)
    mapped, tasks, leftover = 0, list[str](), 0
    if not narrowed.orphans_only:
        unmapped = await asyncio.to_thread(deps.store.unmapped_entries, scope, session)
        diagrams = await _diagrams(deps, scope, session)
        failed: list[str] = []
        for task_id, entries in _by_task(unmapped).items():
            if narrowed.diagram not in (None, task_id):
                continue
            if task_id not in diagrams:
                leftover += len(entries)
                continue
            got = await _update_alone(deps, llm, scope, diagrams[task_id], entries, fence)
            if got is None:  # it waits for its own timer, not the session's
                failed.append(task_id)
                continue
            mapped, leftover = mapped + got, leftover + len(entries) - got
            tasks.append(task_id)
        await _arm_retries(deps, tenant, session, failed, narrowed.failures + 1)
    if leftover > 0:
        due = deps.clock.now() + deps.settings.diagram_delay_s
        await deps.scheduler.arm(
            l2_timer_key(tenant, session), StageTask(Stage.L2, tenant, session), due
        )
    if attempt is not None:
        result = {"mapped": mapped, "orphaned": orphaned, "leftover": leftover}
        draft = ReceiptDraft(attempt.task_id, "offload-l2", deps.clock.now(), result,
                             attempt=attempt)  # fmt: skip
        await asyncio.to_thread(deps.store.record_receipt, scope, draft, fence)
    return L2Outcome(mapped, orphaned, leftover, tuple(tasks))


async def _update_alone(
    deps: StageDeps,
    llm: LLM,
    scope: Scope,
    diagram: Diagram,
    entries: Sequence[Entry],
    fence: Fence | None,
) -> int | None:
    """`_update`, or None when the diagram's reply stayed unusable (recorded by `_update`)."""
    try:
        return await _update(deps, llm, scope, diagram, entries, fence)
    except LLMOutputInvalid:
        return None


async def _arm_retries(
    deps: StageDeps, tenant: str, session: str, failed: Sequence[str], failures: int
) -> None:
    """A retry timer per diagram that failed, after its `failures`-th failure."""
    due = deps.clock.now() + retry_delay_s(failures)
    for task_id in failed:
        task = StageTask(Stage.L2, tenant, session, {DIAGRAM: task_id, FAILURES: failures})
        await deps.scheduler.arm(diagram_timer_key(tenant, session, task_id), task, due)


async def _diagrams(deps: StageDeps, scope: Scope, session: str) -> dict[str, Diagram]:
    found = await asyncio.to_thread(deps.store.list_diagrams, scope, session)
    return {d.task_id: d for d in found}


def _by_task(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    grouped: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        if entry.task_id is not None:
            grouped[entry.task_id].append(entry)
    return grouped


async def _orphan_old(deps: StageDeps, scope: Scope, session: str, fence: Fence | None) -> int:
    cutoff = deps.clock.now() - deps.settings.orphan_max_age_s
    unmapped = await asyncio.to_thread(deps.store.unmapped_entries, scope, session)
    old = _by_task([e for e in unmapped if e.created_at <= cutoff])
    if not old:
        return 0
    diagrams = await _diagrams(deps, scope, session)
    count = 0
    for task_id, entries in old.items():
        diagram = diagrams.get(task_id)
        if diagram is None:
            continue
        text = with_orphan_node(diagram.mermaid)
        write = DiagramWrite(
            task_id, text, diagram.version, {e.call_id: ORPHAN_NODE for e in entries}
        )
        await asyncio.to_thread(
            deps.store.save_diagram, scope, session, write, deps.clock.now(), fence
        )
        count += len(entries)
    return count


def with_orphan_node(text: str) -> str:
    """`text` (or a new diagram) with the orphan node, added once."""
    lines = text.splitlines() if text.strip() else [mermaid.HEADER]
    if any(line.strip().startswith(ORPHAN_NODE) for line in lines[1:]):
        return "\n".join(lines)
    return "\n".join([*lines, mermaid.INDENT + ORPHAN_LINE])


async def _update(
    deps: StageDeps,
    llm: LLM,
    scope: Scope,
    diagram: Diagram,
    entries: Sequence[Entry],
    fence: Fence | None,
) -> int:
    batch = list(entries[:MAX_CALLS_PER_PROMPT])
    mapped = await asyncio.to_thread(deps.store.list_entries, scope, diagram.session)
    in_use = frozenset(
        e.node_id for e in mapped if e.task_id == diagram.task_id and e.node_id is not None
    )
    origin = Origin(scope.tenant, diagram.session, f"{STAGE}:{diagram.task_id}", deps.clock.now())
    detail = {"task": diagram.task_id}
    try:
        proposal = await propose(deps, llm, diagram, batch, in_use)
    except LLMError as exc:
        if recordable(exc):
            failure = origin.failed(STAGE, exc, detail=detail)
            await asyncio.to_thread(deps.store.record_failures, [failure])
        raise
    write = DiagramWrite(diagram.task_id, proposal.text, diagram.version, proposal.mapping)
    await asyncio.to_thread(
        deps.store.save_diagram, scope, diagram.session, write, deps.clock.now(), fence
    )
    notes: list[Failure] = origin.dropped(STAGE, proposal.dropped, detail=detail)
    if notes:
        await asyncio.to_thread(deps.store.record_failures, notes)
    return len(proposal.mapping)


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a proposed diagram is checked against."""

    current: str
    shown: frozenset[str]
    in_use: frozenset[str]
    max_lines: int
    max_chars: int


@dataclass(frozen=True, slots=True)
class Proposal:
    """A checked reply: the diagram (canonical), call id → node, the mapping items dropped."""

    text: str
    mapping: dict[str, str]
    dropped: list[Dropped]


async def propose(
    deps: StageDeps,
    llm: LLM,
    diagram: Diagram,
    entries: Sequence[Entry],
    in_use: frozenset[str] = frozenset(),
) -> Proposal:
    """The LLM's new diagram for `entries` (`LLMOutputInvalid` when unusable after its repair
    round); the nodes in `in_use` (earlier calls are mapped to them) must stay."""
    rules = _Rules(
        diagram.mermaid, frozenset(e.call_id for e in entries), in_use,
        deps.settings.diagram_max_lines - 1, deps.settings.diagram_max_chars,
    )  # fmt: skip
    messages = _messages(deps, diagram, entries, in_use)
    answer = await ask_checked(llm, STAGE, messages, DiagramReply,
                               lambda reply: _checked(reply, rules))  # fmt: skip
    return answer.value


def _checked(reply: DiagramReply, rules: _Rules) -> Proposal:
    try:
        if reply.rewrite is not None:
            proposed = reply.rewrite
        else:
            edits = [mermaid.Edit(e.start, e.end, tuple(e.lines)) for e in reply.edits]
            proposed = mermaid.apply_edits(rules.current, edits)
        text, nodes = mermaid.validate(proposed, rules.max_lines, rules.max_chars)
    except mermaid.InvalidDiagram as problem:
        raise Unusable(str(problem)) from problem
    lost = sorted(rules.in_use - nodes)
    if lost:
        raise Unusable(f"earlier tool calls are mapped to nodes it removed: {lost}")

    def check(raw: Any) -> MapItem:
        item = MapItem.model_validate(raw)
        if item.call_id not in rules.shown:
            raise Unusable(f"call id {item.call_id!r} was not among the new calls")
        if item.node not in nodes:
            raise Unusable(f"node {item.node!r} is not in the diagram")
        return item

    items = require_kept(check_items(reply.mapping, check), "no new call is mapped to a node",
                         f"map every new call id: {sorted(rules.shown)}")
    mapping: dict[str, str] = {}
    for item in items.kept:
        mapping.setdefault(item.call_id, item.node)
    return Proposal(text, mapping, items.dropped)


def _messages(
    deps: StageDeps, diagram: Diagram, entries: Sequence[Entry], in_use: frozenset[str]
) -> list[dict[str, str]]:
    system = load_prompt("offload_l2").text.replace(
        "{max_lines}", str(deps.settings.diagram_max_lines - 1)
    )
    calls = "\n".join(f"[{e.call_id}] {e.tool}: {shorten(e.summary, 300)}" for e in entries)
    keep = ", ".join(sorted(in_use)) or "(none)"
    user = (
        f"TASK: {diagram.label}\n\nCURRENT DIAGRAM\n{mermaid.numbered(diagram.mermaid)}"
        f"\n\nNODES THAT MUST STAY (earlier calls are mapped to them): {keep}"
        f"\n\nNEW TOOL CALLS\n{calls}"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
