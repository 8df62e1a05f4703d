"""offload-l1: claim pending tool pairs, summarise and score them, store entries and refs.

prompt → call → parse → validate → apply. The claim survives a crash (it expires after its
lease and the pairs are claimed again); entries are unique per call id, so a re-run never
duplicates one. Every settled pair gets an entry and a ref:
- a reply is accepted when it finished normally, parses as exactly `{"entries": [...]}` and
  summarises at least one call shown; its invalid items (unknown call ids, empty summaries,
  scores out of range) are dropped and noted; a pair it left out gets the offline summary with
  a low score;
- an unusable reply (truncated, invalid after its repair round, no valid entry) splits its
  calls in halves (`stages.bisect`); a single call whose reply stays unusable gets the offline
  summary, and the failure is noted (`fallback`, with the raw replies);
- pairs the run's attempts did not reach are given back for the next run.
A transport failure (endpoint down, timeouts, HTTP errors) stops the run: the pairs settled
before it are stored, the rest of the claim is given back, a `stage` failure is recorded and
the task fails (the pipeline retries it); nothing is lost.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, Field

from stratamem.domain import Mode, Scope
from stratamem.errors import LLMError
from stratamem.llm.base import LLM
from stratamem.llm.prompts import load_prompt
from stratamem.offload.offline import offline_entry, shorten, squash
from stratamem.offload.schedule import Stage, StageTask, l1_timer_key
from stratamem.offload.stage import StageDeps, arm_diagram_timer, ref_id_for
from stratamem.stages.bisect import Bisection, bisect
from stratamem.stages.checked import (
    Dropped,
    Items,
    Unusable,
    ask_checked,
    check_items,
    require_kept,
)
from stratamem.stages.content import content_problem
from stratamem.stages.envelope import StrictReply, array_of
from stratamem.stages.records import Origin, reason, recordable
from stratamem.store.evidence.receipts import Attempt, ReceiptDraft
from stratamem.store.failures.records import Failure, FailureKind
from stratamem.store.offload.records import Claim, ClaimCommit, Entry, NewEntry, ToolPair

STAGE = Stage.L1.value


class SummaryItem(BaseModel):
    call_id: str
    summary: str
    score: int = Field(ge=0, le=10)


class SummaryReply(StrictReply):
    entries: Annotated[list[Any], array_of(SummaryItem)]


@dataclass(frozen=True, slots=True)
class L1Outcome:
    claimed: int = 0
    created: tuple[Entry, ...] = ()
    duplicates: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    dropped: int = 0
    released: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Summaries:
    """What a run decided: entries for the settled pairs (in order), the call ids given the
    offline summary, and the failure notes."""

    entries: list[NewEntry]
    fallbacks: list[str] = field(default_factory=list)
    notes: list[Failure] = field(default_factory=list)
    interrupted: LLMError | None = None


@dataclass(frozen=True, slots=True)
class _Summarised:
    entries: list[NewEntry]
    fallbacks: list[str]
    dropped: list[Dropped]


async def run_l1(
    deps: StageDeps, tenant: str, session: str, attempt: Attempt | None = None
) -> L1Outcome:
    """One offload-l1 run for a session (its receipt, when run by the pipeline, is written with
    the entries: under the task id, or `<task>@<claim>` when the run was interrupted)."""
    scope, now = Scope(tenant), deps.clock.now()
    claim = await asyncio.to_thread(
        deps.store.claim_pairs, scope, session, deps.ids.new_id(), now,
        deps.settings.l1_lease_s, deps.settings.l1_claim_max,
    )  # fmt: skip
    if not claim.pairs:
        await _rearm_behind_live_claim(deps, tenant, session)
        return L1Outcome(duplicates=claim.duplicates)
    origin = Origin(tenant, session, claim.claim_id, now)
    done = await summarise(deps, claim.pairs, origin)
    receipt = _receipt(attempt, claim, done, deps.clock.now())
    created = await _complete(deps, scope, session, claim, done, receipt)
    if done.interrupted is not None:
        if recordable(done.interrupted):
            failure = origin.failed(STAGE, done.interrupted)
            await asyncio.to_thread(deps.store.record_failures, [failure])
        raise done.interrupted
    left = tuple(p.call_id for p in claim.pairs[len(done.entries) :])
    await arm_diagram_timer(deps, tenant, session)
    if left or len(claim.pairs) >= deps.settings.l1_claim_max:
        await deps.scheduler.enqueue(StageTask(Stage.L1, tenant, session))
    dropped = sum(n.kind is FailureKind.ITEM for n in done.notes)
    return L1Outcome(len(claim.pairs), tuple(created), claim.duplicates,
                     tuple(done.fallbacks), dropped, left)  # fmt: skip


def _receipt(
    attempt: Attempt | None, claim: Claim, done: Summaries, now: float
) -> ReceiptDraft | None:
    if attempt is None:
        return None
    task_id = attempt.task_id
    if done.interrupted is not None:
        task_id = f"{task_id}@{claim.claim_id}"
    result = {"pairs": len(claim.pairs), "entries": len(done.entries)}
    return ReceiptDraft(task_id, "offload-l1", now, result, attempt=attempt)


async def _complete(
    deps: StageDeps,
    scope: Scope,
    session: str,
    claim: Claim,
    done: Summaries,
    receipt: ReceiptDraft | None = None,
) -> list[Entry]:
    """Store the settled entries, note what failed, give the rest of the claim back."""
    refs = {e.pair.call_id: ref_id_for(session, e.pair.call_id) for e in done.entries}
    created: list[Entry] = []
    if done.entries:
        commit = ClaimCommit(claim.claim_id, done.entries, refs, deps.clock.now(), receipt)
        created = await asyncio.to_thread(deps.store.complete_claim, scope, session, commit)
    if done.notes:
        await asyncio.to_thread(deps.store.record_failures, done.notes)
    if len(done.entries) < len(claim.pairs):
        await asyncio.to_thread(deps.store.release_claim, scope, session, claim.claim_id)
    return created


async def _rearm_behind_live_claim(deps: StageDeps, tenant: str, session: str) -> None:
    """Pairs under another run's live claim: come back when that claim expires, in case its
    run died."""
    expiry = await asyncio.to_thread(
        deps.store.next_claim_expiry, Scope(tenant), session, deps.clock.now()
    )
    if expiry is not None:
        task = StageTask(Stage.L1, tenant, session)
        await deps.scheduler.arm(l1_timer_key(tenant, session), task, expiry)


async def summarise(deps: StageDeps, pairs: Sequence[ToolPair], origin: Origin) -> Summaries:
    """Entries for a prefix of `pairs` (all of them unless the attempts ran out or a transport
    failure interrupted the run), in order."""
    max_chars = deps.settings.summary_max_chars
    llm = deps.llm
    if llm is None:
        return Summaries([offline_entry(p, max_chars) for p in pairs])

    async def attempt(chunk: tuple[ToolPair, ...]) -> _Summarised:
        return await _summarise_chunk(deps, llm, chunk)

    chunks = _chunks(pairs, deps.settings.l1_prompt_result_chars,
                     deps.settings.l1_prompt_max_chars)  # fmt: skip
    return _settled(deps, origin, await bisect(chunks, attempt, deps.settings.l1_max_attempts))


async def _summarise_chunk(deps: StageDeps, llm: LLM, chunk: Sequence[ToolPair]) -> _Summarised:
    shown = frozenset(p.call_id for p in chunk)
    answer = await ask_checked(llm, STAGE, _messages(deps, chunk), SummaryReply,
                               lambda reply: read_reply(reply, shown))  # fmt: skip
    settings = deps.settings
    entries, fallbacks = _entries(answer.value.kept, chunk, settings.summary_max_chars,
                                  settings.fallback_score)  # fmt: skip
    return _Summarised(entries, fallbacks, answer.value.dropped)


def _settled(
    deps: StageDeps, origin: Origin, bisection: Bisection[ToolPair, _Summarised]
) -> Summaries:
    """Entries of the settled pairs: accepted summaries, offline ones for failed calls."""
    max_chars, low = deps.settings.summary_max_chars, deps.settings.fallback_score
    out = Summaries([], interrupted=bisection.interrupted)
    out.notes.extend(
        origin.failure(STAGE, FailureKind.BATCH, reason(s.failure), s.failure.raws,
                       detail={"call_ids": [p.call_id for p in s.items]})
        for s in bisection.splits
    )  # fmt: skip
    for settled in bisection.settled:
        calls = {"call_ids": [p.call_id for p in settled.items]}
        if settled.result is not None:
            out.entries.extend(settled.result.entries)
            out.fallbacks.extend(settled.result.fallbacks)
            out.notes.extend(origin.dropped(STAGE, settled.result.dropped, detail=calls))
        elif settled.failure is not None:
            pair = settled.items[0]
            out.entries.append(offline_entry(pair, max_chars, cap_score=low))
            out.fallbacks.append(pair.call_id)
            out.notes.append(origin.failure(STAGE, FailureKind.FALLBACK, reason(settled.failure),
                                            settled.failure.raws, detail=calls))  # fmt: skip
    return out


def read_reply(reply: SummaryReply, shown: frozenset[str]) -> Items[SummaryItem]:
    """The reply's entries checked one by one; unusable when none summarises a call shown."""
    seen: set[str] = set()

    def check(raw: Any) -> SummaryItem:
        item = SummaryItem.model_validate(raw)
        if item.call_id not in shown:
            raise Unusable(f"call id {item.call_id!r} was not shown; use only: {sorted(shown)}")
        if item.call_id in seen:
            raise Unusable(f"call id {item.call_id!r} is summarised already")
        problem = content_problem(item.summary, 1, "summary")
        if problem is not None:
            raise Unusable(problem)
        seen.add(item.call_id)
        return item

    return require_kept(check_items(reply.entries, check), "no entry summarises a call shown",
                        f"give one entry per call id, exactly as shown: {sorted(shown)}")


def _chunks(pairs: Sequence[ToolPair], cap: int, max_chars: int) -> list[list[ToolPair]]:
    """`pairs` in order, split so that each prompt shows at most `max_chars` of blocks."""
    chunks: list[list[ToolPair]] = [[]]
    used = 0
    for pair in pairs:
        size = len(_pair_block(pair, cap))
        if chunks[-1] and used + size > max_chars:
            chunks.append([])
            used = 0
        chunks[-1].append(pair)
        used += size
    return chunks


def _messages(deps: StageDeps, pairs: Sequence[ToolPair]) -> list[dict[str, str]]:
    prompt = load_prompt("offload_l1")
    system = prompt.text.replace("{max_chars}", str(deps.settings.summary_max_chars))
    cap = deps.settings.l1_prompt_result_chars
    blocks = [_pair_block(p, cap) for p in pairs]
    user = "TOOL CALLS\n\n" + "\n\n".join(blocks)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _pair_block(pair: ToolPair, cap: int) -> str:
    output = pair.output
    shown = shorten(output, cap)
    params = shorten(json.dumps(pair.params, ensure_ascii=False, sort_keys=True), 600)
    cut = f" (first {cap} of {len(output)} characters)" if len(output) > cap else ""
    return f"[{pair.call_id}] tool: {pair.tool}\nparams: {params}\nresult{cut}:\n{shown}"


def _entries(
    items: Sequence[SummaryItem], pairs: Sequence[ToolPair], max_chars: int, fallback_score: int
) -> tuple[list[NewEntry], list[str]]:
    """An entry per pair, in order: the model's summary, else the offline one (a low score)."""
    chosen = {item.call_id: item for item in items}
    entries: list[NewEntry] = []
    fallbacks: list[str] = []
    for pair in pairs:
        found = chosen.get(pair.call_id)
        if found is None:
            fallbacks.append(pair.call_id)
            entries.append(offline_entry(pair, max_chars, cap_score=fallback_score))
        else:
            summary = shorten(squash(found.summary), max_chars)
            entries.append(NewEntry(pair, summary, found.score, Mode.LLM))
    return entries, fallbacks
