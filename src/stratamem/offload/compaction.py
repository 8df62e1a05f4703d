"""Compaction: fit a chat context into its token budget, by how full it is.

- mild (fill >= `mild_ratio`): tool results whose entry scores at least `mild_min_score` are
  replaced by their summaries, best scores first, only where the summary is shorter;
- aggressive (>= `aggressive_ratio`): the same down to `aggressive_min_score`, then the oldest
  history is dropped;
- emergency (>= `emergency_ratio`): every result with an entry may be replaced, the tail's too,
  and history is dropped until the context fits.
Every level aims at `mild_ratio` of the budget. The leading system messages and everything since
the last user message are kept; an assistant message with tool calls and its tool results are
kept or dropped together. The diagrams of the tasks whose calls were dropped are injected, with
the refs of the dropped results, within `diagram_budget_share` of the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stratamem.errors import InvalidInput
from stratamem.offload.models import Diagram, Entry
from stratamem.offload.settings import OffloadSettings
from stratamem.offload.tokens import context_tokens, message_tokens, text_tokens

ChatMessage = dict[str, Any]


class Level(StrEnum):
    NONE = "none"
    MILD = "mild"
    AGGRESSIVE = "aggressive"
    EMERGENCY = "emergency"


@dataclass(frozen=True, slots=True)
class Compaction:
    messages: list[ChatMessage]
    level: Level
    budget_tokens: int
    tokens_before: int
    tokens_after: int
    replaced: tuple[str, ...] = ()
    dropped_messages: int = 0
    diagrams: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level.value,
            "budget_tokens": self.budget_tokens,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "fits_budget": self.tokens_after <= self.budget_tokens,
            "replaced": list(self.replaced),
            "dropped_messages": self.dropped_messages,
            "diagrams": list(self.diagrams),
            "messages": self.messages,
        }


def level_for(tokens: int, budget_tokens: int, settings: OffloadSettings) -> Level:
    fill = tokens / budget_tokens
    if fill >= settings.emergency_ratio:
        return Level.EMERGENCY
    if fill >= settings.aggressive_ratio:
        return Level.AGGRESSIVE
    if fill >= settings.mild_ratio:
        return Level.MILD
    return Level.NONE


def summary_text(entry: Entry) -> str:
    return (
        f"[offloaded result of {entry.tool} · ref {entry.ref_id} · {entry.score}/10] "
        f"{entry.summary}"
    )


@dataclass(slots=True)
class _Work:
    """The context being compacted, and what has been done to it."""

    messages: list[ChatMessage]
    head: int  # leading system messages: [0, head)
    tail: int  # kept whole: [tail, end)
    tokens: int
    replaced: list[str] = field(default_factory=list)
    dropped: list[ChatMessage] = field(default_factory=list)


def compact(
    messages: Sequence[Mapping[str, Any]],
    budget_tokens: int,
    entries: Mapping[str, Entry],
    diagrams: Sequence[Diagram],
    settings: OffloadSettings,
) -> Compaction:
    """Compact `messages` (OpenAI chat format) for `budget_tokens`; `entries` by call id."""
    if budget_tokens < 1:
        raise InvalidInput("budget_tokens must be at least 1")
    copied = [dict(m) for m in messages]
    before = context_tokens(copied)
    level = level_for(before, budget_tokens, settings)
    if level is Level.NONE:
        return Compaction(copied, level, budget_tokens, before, before)
    work = _Work(copied, _head(copied), _tail(copied), before)
    target = int(budget_tokens * settings.mild_ratio)
    reserve = int(budget_tokens * settings.diagram_budget_share)
    if level is Level.MILD:
        _replace(work, entries, settings.mild_min_score, False, target)
    else:
        emergency = level is Level.EMERGENCY
        _replace(work, entries, _min_score(level, settings), emergency, target - reserve)
        _drop_oldest(work, target - reserve)
    injected = _inject(work, entries, diagrams, reserve)
    after = context_tokens(work.messages)
    return Compaction(
        work.messages, level, budget_tokens, before, after, tuple(work.replaced),
        len(work.dropped), injected,
    )  # fmt: skip


def _min_score(level: Level, settings: OffloadSettings) -> int:
    if level is Level.MILD:
        return settings.mild_min_score
    if level is Level.AGGRESSIVE:
        return settings.aggressive_min_score
    return 0


def _head(messages: Sequence[ChatMessage]) -> int:
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    return head


def _tail(messages: Sequence[ChatMessage]) -> int:
    """Index of the last user message (everything from it on is kept), else of the last
    message's unit."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    index = len(messages) - 1
    while index > 0 and messages[index].get("role") == "tool":
        index -= 1
    return max(index, 0)


def _replace(
    work: _Work, entries: Mapping[str, Entry], min_score: int, in_tail: bool, target: int
) -> None:
    end = len(work.messages) if in_tail else work.tail
    candidates: list[tuple[int, int, Entry]] = []
    for index in range(work.head, end):
        message = work.messages[index]
        entry = entries.get(str(message.get("tool_call_id") or ""))
        if message.get("role") == "tool" and entry is not None and entry.score >= min_score:
            candidates.append((-entry.score, index, entry))
    for _, index, entry in sorted(candidates, key=lambda c: (c[0], c[1])):
        if work.tokens <= target:
            return
        old = work.messages[index]
        new = {**old, "content": summary_text(entry)}
        saved = message_tokens(old) - message_tokens(new)
        if saved > 0:
            work.messages[index] = new
            work.tokens -= saved
            work.replaced.append(entry.call_id)


def _units(messages: Sequence[ChatMessage], start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) split into units: an assistant message with its tool results is one."""
    units: list[tuple[int, int]] = []
    index = start
    while index < end:
        stop = index + 1
        if messages[index].get("tool_calls"):
            while stop < end and messages[stop].get("role") == "tool":
                stop += 1
        units.append((index, stop))
        index = stop
    return units


def _drop_oldest(work: _Work, target: int) -> None:
    units = _units(work.messages, work.head, work.tail)
    cut = work.head
    for start, stop in units:
        if work.tokens <= target:
            break
        work.tokens -= sum(message_tokens(m) for m in work.messages[start:stop])
        cut = stop
    work.dropped = work.messages[work.head : cut]
    del work.messages[work.head : cut]
    work.tail -= cut - work.head


def _inject(
    work: _Work, entries: Mapping[str, Entry], diagrams: Sequence[Diagram], reserve: int
) -> tuple[str, ...]:
    dropped_ids = [str(m.get("tool_call_id")) for m in work.dropped if m.get("role") == "tool"]
    dropped = [entries[i] for i in dropped_ids if i in entries]
    if not dropped:
        return ()
    tasks = {e.task_id for e in dropped if e.task_id is not None}
    parts = [f"{len(work.dropped)} earlier messages were offloaded to save context."]
    used, shown = text_tokens(parts[0]), []
    for diagram in (d for d in diagrams if d.task_id in tasks and d.mermaid):
        block = (
            f"Task «{diagram.label}» ({diagram.status.value}):\n```mermaid\n{diagram.mermaid}\n```"
        )
        if used + text_tokens(block) <= reserve:
            parts.append(block)
            used += text_tokens(block)
            shown.append(diagram.task_id)
    header = "Their tool results can be read back exactly by ref:"
    lines: list[str] = []
    used += text_tokens(header)
    for entry in dropped:
        line = f"- {entry.tool} ({entry.call_id}): ref {entry.ref_id}"
        if used + text_tokens(line) > reserve:
            break
        lines.append(line)
        used += text_tokens(line)
    if lines:
        parts.append("\n".join([header, *lines]))
    note: ChatMessage = {"role": "system", "content": "\n\n".join(parts)}
    work.messages.insert(work.head, note)
    return tuple(shown)
