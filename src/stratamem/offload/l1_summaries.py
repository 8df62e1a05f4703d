"""offload-l1: claim pending tool pairs, summarise and score them, store entries and refs.

prompt → call → parse → validate → apply. The claim survives a crash (it expires after its
lease and the pairs are claimed again); entries are unique per call id, so a re-run never
duplicates one. Every claimed pair gets an entry: one the LLM left out gets the offline summary
with a low score. A failed LLM call gives the claim back and fails the task (the pipeline
retries it); nothing is lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from stratamem.domain import Mode, Scope
from stratamem.errors import LLMError
from stratamem.llm.prompts import load_prompt
from stratamem.offload.models import Claim, Entry, NewEntry, ToolPair
from stratamem.offload.offline import offline_entry, shorten, squash
from stratamem.offload.schedule import Stage, StageTask, l1_timer_key
from stratamem.offload.stage import StageDeps, arm_diagram_timer, ref_id_for

log = logging.getLogger(__name__)
STAGE = Stage.L1.value


class SummaryItem(BaseModel):
    call_id: str
    summary: str
    score: int = Field(ge=0, le=10)


class SummaryReply(BaseModel):
    entries: list[SummaryItem]


@dataclass(frozen=True, slots=True)
class L1Outcome:
    claimed: int = 0
    created: tuple[Entry, ...] = ()
    duplicates: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    unknown_ids: tuple[str, ...] = field(default=())


async def run_l1(deps: StageDeps, tenant: str, session: str) -> L1Outcome:
    """One offload-l1 run for a session."""
    scope, now = Scope(tenant), deps.clock.now()
    claim = await asyncio.to_thread(
        deps.store.claim_pairs, scope, session, deps.ids.new_id(), now,
        deps.settings.l1_lease_s, deps.settings.l1_claim_max,
    )  # fmt: skip
    if not claim.pairs:
        await _rearm_behind_live_claim(deps, tenant, session)
        return L1Outcome(duplicates=claim.duplicates)
    try:
        entries, fallbacks, unknown = await summarise(deps, claim.pairs)
    except LLMError:
        await asyncio.to_thread(deps.store.release_claim, scope, session, claim.claim_id)
        raise
    created = await _complete(deps, scope, session, claim, entries)
    await arm_diagram_timer(deps, tenant, session)
    if len(claim.pairs) >= deps.settings.l1_claim_max:
        await deps.scheduler.enqueue(StageTask(Stage.L1, tenant, session))
    return L1Outcome(len(claim.pairs), tuple(created), claim.duplicates, fallbacks, unknown)


async def _complete(
    deps: StageDeps, scope: Scope, session: str, claim: Claim, entries: Sequence[NewEntry]
) -> list[Entry]:
    refs = {p.call_id: ref_id_for(session, p.call_id) for p in claim.pairs}
    return await asyncio.to_thread(
        deps.store.complete_claim, scope, session, claim.claim_id, entries, refs,
        deps.clock.now(),
    )  # fmt: skip


async def _rearm_behind_live_claim(deps: StageDeps, tenant: str, session: str) -> None:
    """Pairs under another run's live claim: come back when that claim expires, in case its
    run died."""
    expiry = await asyncio.to_thread(
        deps.store.next_claim_expiry, Scope(tenant), session, deps.clock.now()
    )
    if expiry is not None:
        task = StageTask(Stage.L1, tenant, session)
        await deps.scheduler.arm(l1_timer_key(tenant, session), task, expiry)


async def summarise(
    deps: StageDeps, pairs: Sequence[ToolPair]
) -> tuple[list[NewEntry], tuple[str, ...], tuple[str, ...]]:
    """Entries for `pairs` (in order), the call ids given fallback entries, and ids the LLM
    named that were not shown."""
    max_chars = deps.settings.summary_max_chars
    if deps.llm is None:
        return [offline_entry(p, max_chars) for p in pairs], (), ()
    entries: list[NewEntry] = []
    fallbacks: list[str] = []
    unknown: list[str] = []
    for chunk in _chunks(pairs, deps.settings.l1_prompt_result_chars,
                         deps.settings.l1_prompt_max_chars):  # fmt: skip
        reply = await deps.llm.complete_json(STAGE, _messages(deps, chunk), SummaryReply)
        done, left_out, named = _validated(reply, chunk, max_chars, deps.settings.fallback_score)
        entries += done
        fallbacks += left_out
        unknown += named
    return entries, tuple(fallbacks), tuple(unknown)


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


def _validated(
    reply: SummaryReply, pairs: Sequence[ToolPair], max_chars: int, fallback_score: int
) -> tuple[list[NewEntry], tuple[str, ...], tuple[str, ...]]:
    shown = {p.call_id for p in pairs}
    chosen: dict[str, SummaryItem] = {}
    unknown: list[str] = []
    for item in reply.entries:
        if item.call_id not in shown:
            unknown.append(item.call_id)
        elif item.call_id not in chosen and squash(item.summary):
            chosen[item.call_id] = item
    if unknown:
        log.warning("offload-l1: the model named call ids it was not shown: %s", unknown[:10])
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
    return entries, tuple(fallbacks), tuple(unknown)
