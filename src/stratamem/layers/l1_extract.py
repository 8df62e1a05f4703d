"""L1 extraction: a batch of new turns (with background turns) becomes proposed memories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratamem.domain import MemoryType, Turn
from stratamem.layers.model import NewMemory
from stratamem.layers.schemas import ExtractedMemory, Extraction, parse_activity_date
from stratamem.layers.settings import LayerSettings
from stratamem.layers.views import Aliases, turn_line
from stratamem.llm.prompts import Prompt

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


def bound_schema(aliases: Aliases) -> type[Extraction]:
    return Extraction.bind(turns=aliases.shown())


def to_new_memories(
    extraction: Extraction, aliases: Aliases, batch: Sequence[Turn], limit: int
) -> list[NewMemory]:
    """Validated replies as memories with real turn ids and absolute activity times."""
    by_id = {t.id: t for t in batch}
    memories: list[NewMemory] = []
    for item in extraction.memories[:limit]:
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
