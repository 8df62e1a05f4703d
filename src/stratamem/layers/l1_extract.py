"""L1 extraction: a batch of new turns (with background turns) becomes proposed memories."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

from stratamem.domain import MemoryType, Turn
from stratamem.layers.model import NewMemory
from stratamem.layers.schemas import (
    ExtractedMemory,
    Extraction,
    Shown,
    check_memory,
    parse_activity_date,
)
from stratamem.layers.settings import LayerSettings
from stratamem.layers.views import Aliases, turn_line
from stratamem.llm.prompts import Prompt
from stratamem.stages.checked import Items, Unusable, check_items, require_some
from stratamem.stages.support import Cited, event_time, support_problem

STAGE = "L1"


def extraction_messages(
    prompt: Prompt,
    batch: Sequence[Turn],
    background: Sequence[Turn],
    settings: LayerSettings,
) -> tuple[list[dict[str, Any]], Aliases]:
    """The chat messages of one extraction, and the aliases of the new turns (`T1` …)."""
    aliases = Aliases.of("T", [t.id for t in batch])
    limit = settings.max_turn_chars_shown
    lines = ["BACKGROUND turns (context only, already processed):"]
    lines += [turn_line(f"B{i}", t, limit) for i, t in enumerate(background, start=1)] or [
        "(none)"
    ]
    lines.append("")
    lines.append("NEW turns (extract from these):")
    lines += [turn_line(f"T{i}", t, limit) for i, t in enumerate(batch, start=1)]
    lines.append("")
    lines.append(f"Return at most {settings.max_memories_per_batch} memories.")
    messages = [
        {"role": "system", "content": prompt.text},
        {"role": "user", "content": "\n".join(lines)},
    ]
    return messages, aliases


def read_reply(reply: Extraction, aliases: Aliases, min_words: int) -> Items[ExtractedMemory]:
    """The reply's memories checked one by one (`Unusable` when every one is invalid)."""
    shown = Shown({"turns": aliases.shown()}, min_words)
    return require_some(check_items(reply.memories, lambda raw: check_memory(raw, shown)),
                        "memory")  # fmt: skip


def ground(
    items: Sequence[ExtractedMemory],
    aliases: Aliases,
    segment: Sequence[Turn],
    shown: Sequence[Turn],
    min_support: float,
) -> Items[ExtractedMemory]:
    """The items their cited turns support (`stages.support`); the others are refused, each
    with its reason. `shown` is every turn the prompt showed, in order (whose speakers a
    memory may name, and whose next turn may confirm an assistant's)."""
    by_id = {t.id: t for t in segment}
    after = {a.id: b for a, b in pairwise(shown)}
    names = frozenset(t.speaker for t in shown if t.speaker)

    def check(item: ExtractedMemory) -> ExtractedMemory:
        turns = tuple(by_id[aliases.real[a]] for a in dict.fromkeys(item.source_turn_ids))
        cited = Cited(turns, tuple(after.get(t.id) for t in turns), names)
        problem = support_problem(item.content, cited, min_support=min_support)
        if problem is not None:
            raise Unusable(problem)
        return item

    checked = check_items(items, check)
    refused = [replace(d, item=items[d.index].model_dump(mode="json")) for d in checked.dropped]
    return Items(checked.kept, refused)


def to_new_memories(
    items: Sequence[ExtractedMemory], aliases: Aliases, batch: Sequence[Turn], limit: int
) -> list[NewMemory]:
    """Checked items as memories with real turn ids and absolute activity times."""
    by_id = {t.id: t for t in batch}
    memories: list[NewMemory] = []
    for item in items[:limit]:
        sources = tuple(dict.fromkeys(aliases.real[a] for a in item.source_turn_ids))
        memories.append(
            NewMemory(
                type=item.type,
                content=item.content,
                priority=item.priority,
                source_turn_ids=sources,
                activity_start=_activity(item, [by_id[s] for s in sources]),
                said_at=min(by_id[s].timestamp for s in sources),
            )
        )
    return memories


def _activity(item: ExtractedMemory, sources: Sequence[Turn]) -> float | None:
    """An event's time comes from its turns: the date the model resolved when a cited turn
    gives reason for it, else the earliest cited turn's (`stages.support.event_time`); other
    memories keep the date the model gave, if any."""
    resolved = None if item.activity_date is None else parse_activity_date(item.activity_date)
    if item.type is MemoryType.EPISODIC:
        return event_time(resolved, sources)
    return resolved
