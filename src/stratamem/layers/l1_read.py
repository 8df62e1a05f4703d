"""L1 with an LLM: a batch of turns is settled by extraction attempts, bisecting what fails.

Each attempt extracts memories from a segment of the batch (its earlier turns shown as
background). A reply is accepted when it finished normally, parses as exactly the expected
object and at least one of its items (or none at all, written out) passes the item checks;
invalid items are dropped and noted. An unusable reply (truncated, invalid after its repair
round, every item invalid) splits the segment in halves (`stages.bisect`), down to the single
turn that fails: that turn is quarantined (a `quarantine` failure with the raw replies and the
reason, open, retryable) and the cursor moves past it. A transport failure stops the reading
(`interrupted`): what was settled before it is kept, the cursor never passes the turns it hit.

So every turn up to the new cursor is either covered by an accepted extraction or quarantined,
never skipped. Calls per run: at most `l1_max_attempts` attempts (raised to the depth that
settles the first turn), each at most four calls (a reply and its repair round, each possibly
repaired once by the client), then reconciliation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from stratamem.domain import Turn
from stratamem.errors import LLMError
from stratamem.layers import l1_extract
from stratamem.layers.model import NewMemory, stable_id
from stratamem.layers.schemas import Extraction
from stratamem.layers.settings import LayerSettings
from stratamem.llm.base import LLM
from stratamem.llm.errors import LLMOutputInvalid
from stratamem.llm.prompts import load_prompt
from stratamem.stages.bisect import Bisection, bisect
from stratamem.stages.checked import Dropped, ask_checked
from stratamem.stages.records import Origin, reason
from stratamem.store.failures.records import Failure, FailureKind

STAGE = l1_extract.STAGE


@dataclass(frozen=True, slots=True)
class Extracted:
    """What one accepted attempt gave: memories, the items it dropped (invalid) and the items
    it refused (unsupported by the turns they cite)."""

    memories: list[NewMemory]
    dropped: list[Dropped]
    refused: list[Dropped] = field(default_factory=list)
    refused_turns: list[tuple[str, ...]] = field(default_factory=list)
    """The turns each refused item cited (real ids)."""

    def records(self, origin: Origin, turn_ids: Sequence[str]) -> list[Failure]:
        """Noted records of the dropped items (on the attempt's turns) and of the refused ones
        (on the turns they cited)."""
        notes = origin.dropped(STAGE, self.dropped, turn_ids)
        for item, cited in zip(self.refused, self.refused_turns, strict=True):
            notes += origin.dropped(STAGE, [item], cited, kind=FailureKind.REFUSED)
        return notes


@dataclass(frozen=True, slots=True)
class L1Read:
    """What a run read: memories, the turns it settled (a prefix of the batch), the
    quarantined turns and the notes (rejected batches, dropped items)."""

    memories: list[NewMemory]
    settled: list[Turn]
    quarantined: list[Failure] = field(default_factory=list)
    notes: list[Failure] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    interrupted: LLMError | None = None


@dataclass(frozen=True, slots=True)
class ReadRun:
    """Who reads: where its records come from, and what it runs with."""

    llm: LLM
    origin: Origin
    settings: LayerSettings


async def extract(
    run: ReadRun, segment: Sequence[Turn], background: Sequence[Turn]
) -> Extracted:
    """One extraction attempt; `LLMOutputInvalid` when its reply is unusable."""
    settings = run.settings
    prompt = load_prompt("l1_extract")
    messages, aliases = l1_extract.extraction_messages(prompt, segment, background, settings)
    answer = await ask_checked(
        run.llm, STAGE, messages, Extraction,
        lambda reply: l1_extract.read_reply(reply, aliases, settings.min_memory_words),
    )  # fmt: skip
    items = answer.value
    grounded = l1_extract.ground(items.kept, aliases, segment, [*background, *segment],
                                 settings.min_support)  # fmt: skip
    memories = l1_extract.to_new_memories(grounded.kept, aliases, segment,
                                          settings.max_memories_per_batch)  # fmt: skip
    cited = [tuple(dict.fromkeys(aliases.real[a] for a in d.item["source_turn_ids"]))
             for d in grounded.dropped]  # fmt: skip
    return Extracted(memories, items.dropped, grounded.dropped, cited)


async def read_batch(run: ReadRun, batch: Sequence[Turn], background: Sequence[Turn]) -> L1Read:
    """Settle `batch` (see the module doc)."""
    seen = [*background, *batch]
    start_of = {turn.id: len(background) + i for i, turn in enumerate(batch)}
    shown = run.settings.context_turns

    async def attempt(segment: tuple[Turn, ...]) -> Extracted:
        start = start_of[segment[0].id]
        return await extract(run, segment, seen[max(0, start - shown) : start])

    bisection = await bisect([batch], attempt, run.settings.l1_max_attempts)
    return outcome(run, bisection, len(batch))


def outcome(run: ReadRun, bisection: Bisection[Turn, Extracted], batch: int) -> L1Read:
    origin = run.origin
    memories: list[NewMemory] = []
    notes = [
        origin.failure(STAGE, FailureKind.BATCH, reason(s.failure), s.failure.raws,
                       turn_ids=_ids(s.items),
                       detail={"first_seq": s.items[0].seq, "last_seq": s.items[-1].seq,
                               "outcomes": _outcomes_at(origin, s.items[0].seq)})
        for s in bisection.splits
    ]  # fmt: skip
    for settled in bisection.settled:
        if settled.result is not None:
            memories += settled.result.memories
            notes += settled.result.records(origin, _ids(settled.items))
    quarantined = [
        quarantine(origin, s.items[0], s.failure) for s in bisection.failed if s.failure
    ]
    settled_turns = [turn for s in bisection.settled for turn in s.items]
    counts = {
        "turns": len(settled_turns),
        "covered": sum(len(s.items) for s in bisection.accepted),
        "quarantined": len(quarantined),
        "rejected_batches": len(bisection.splits),
        "dropped_items": sum(n.kind is FailureKind.ITEM for n in notes),
        "refused_items": sum(n.kind is FailureKind.REFUSED for n in notes),
        "attempts": bisection.attempts,
        "left": batch - len(settled_turns),
    }
    return L1Read(memories, settled_turns, quarantined, notes, counts, bisection.interrupted)


def quarantine(origin: Origin, turn: Turn, failure: LLMOutputInvalid) -> Failure:
    """The record of a turn no accepted extraction covers (one per turn: its id is stable)."""
    return origin.failure(
        STAGE, FailureKind.QUARANTINE, reason(failure), failure.raws,
        failure_id=stable_id("q", origin.tenant, origin.session, turn.id), turn_ids=(turn.id,),
        detail={"seq": turn.seq},
    )  # fmt: skip


def _outcomes_at(origin: Origin, first_seq: int) -> str:
    """Where the outcomes of a split batch's turns are shown (the turn ledger): a split is
    noted, its turns are each extracted, found with nothing, refused or quarantined."""
    return f"/v1/sessions/{origin.session}/turns?after={max(0, first_seq - 1)}"


def _ids(turns: Sequence[Turn]) -> tuple[str, ...]:
    return tuple(t.id for t in turns)
