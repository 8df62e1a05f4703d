"""L1 extraction: a batch of new turns (with background turns) becomes proposed memories."""

from __future__ import annotations

from collections.abc import Sequence
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
from stratamem.stages.checked import Items, check_items, require_some

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
            )
        )
    return memories


def _activity(item: ExtractedMemory, sources: Sequence[Turn]) -> float | None:
    """The date the model resolved, else (for events) the time of the earliest source turn."""
    if item.activity_date is not None:
        return parse_activity_date(item.activity_date)
    if item.type is MemoryType.EPISODIC and sources:
        return min(t.timestamp for t in sources)
    return None
