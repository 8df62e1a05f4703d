"""Compaction: fit a chat context into its token budget, by how full it is.

- mild (fill >= `mild_ratio`): tool results whose entry scores at least `mild_min_score` are
  replaced by their summaries, best scores first, only where the summary is shorter;
- aggressive (>= `aggressive_ratio`): the same down to `aggressive_min_score`, then the oldest
  history is dropped;
- emergency (>= `emergency_ratio`): every result with an entry may be replaced, the tail's too,
  and history is dropped until the context fits.
Every level aims at `mild_ratio` of the budget. The leading system messages and everything since
the last user message are kept; an assistant message with tool calls and its tool results are
kept or dropped together. A tool result is never dropped without a ref: a unit holding a result
with no entry is kept, and listed in `unreferenced` (`Offload.compact` makes offline entries
and refs for those, then compacts again). A note injected where history was dropped lists the
refs of the dropped results, quotes the first user message dropped (the request the work
began with) and shows the diagrams of the tasks whose calls were dropped, within
`diagram_budget_share` of the budget; refs that do not fit are counted, and the session's
offload entries list every one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratamem.errors import InvalidInput
from stratamem.offload.offline import shorten
from stratamem.offload.results import ChatMessage, Compaction, Level
from stratamem.offload.settings import OffloadSettings
from stratamem.offload.tokens import context_tokens, message_tokens, text_tokens
from stratamem.store.offload.records import Diagram, Entry


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
    unreferenced: list[str] = field(default_factory=list)


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
        _drop_oldest(work, target - reserve, entries)
    injected = _inject(work, entries, diagrams, reserve)
    after = context_tokens(work.messages)
    return Compaction(
        work.messages, level, budget_tokens, before, after, tuple(work.replaced),
        len(work.dropped), injected, tuple(work.unreferenced),
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


def _drop_oldest(work: _Work, target: int, entries: Mapping[str, Entry]) -> None:
    """Drop the oldest units between head and tail until the context fits `target`; a unit
    holding a tool result without an entry is kept (it would leave no ref)."""
    kept: list[ChatMessage] = []
    for start, stop in _units(work.messages, work.head, work.tail):
        unit = work.messages[start:stop]
        if work.tokens <= target:
            kept.extend(unit)
            continue
        missing = [i for i in _tool_ids(unit) if i not in entries]
        if missing:
            work.unreferenced.extend(missing)
            kept.extend(unit)
            continue
        work.tokens -= sum(message_tokens(m) for m in unit)
        work.dropped.extend(unit)
    work.messages[work.head : work.tail] = kept
    work.tail = work.head + len(kept)


def _tool_ids(messages: Sequence[ChatMessage]) -> list[str]:
    return [str(m.get("tool_call_id") or "") for m in messages if m.get("role") == "tool"]


@dataclass(slots=True)
class _Note:
    """The injected note, within a token reserve (its first line always)."""

    reserve: int
    parts: list[str] = field(default_factory=list)
    used: int = 0

    def add(self, text: str, *, always: bool = False) -> bool:
        """Add `text` if it fits (or `always`); whether it was added."""
        cost = text_tokens(text)
        if not always and self.used + cost > self.reserve:
            return False
        self.parts.append(text)
        self.used += cost
        return True


def _inject(
    work: _Work, entries: Mapping[str, Entry], diagrams: Sequence[Diagram], reserve: int
) -> tuple[str, ...]:
    if not work.dropped:
        return ()
    dropped = [entries[i] for i in _tool_ids(work.dropped) if i in entries]
    header = f"{len(work.dropped)} earlier messages were offloaded to save context."
    note = _Note(reserve, used=text_tokens(header) + _MORE_REFS_TOKENS)
    listed = _refs(note, dropped)
    more = "" if listed == len(dropped) else f" (refs of {len(dropped) - listed}: offload entries)"
    note.parts.insert(0, header + more)
    request = next((m["content"] for m in work.dropped if m.get("role") == "user"
                    and isinstance(m.get("content"), str)), None)  # fmt: skip
    if request is not None:
        note.add(f"The user's request this work followed: «{shorten(request, 400)}»")
    tasks = {e.task_id for e in dropped if e.task_id is not None}
    shown = []
    for diagram in (d for d in diagrams if d.task_id in tasks and d.mermaid):
        block = (
            f"Task «{diagram.label}» ({diagram.status.value}):\n```mermaid\n{diagram.mermaid}\n```"
        )
        if note.add(block):
            shown.append(diagram.task_id)
    message: ChatMessage = {"role": "system", "content": "\n\n".join(note.parts)}
    work.messages.insert(work.head, message)
    return tuple(shown)


def _refs(note: _Note, dropped: Sequence[Entry]) -> int:
    """Add the refs of the dropped results that fit; returns how many."""
    lines: list[str] = []
    for entry in dropped:
        line = f"- {entry.tool} ({entry.call_id}): ref {entry.ref_id}"
        if note.used + text_tokens("\n".join([_REFS_HEADER, *lines, line])) > note.reserve:
            break
        lines.append(line)
    if lines:
        note.add("\n".join([_REFS_HEADER, *lines]), always=True)
    return len(lines)


_REFS_HEADER = "Their tool results can be read back exactly by ref:"
_MORE_REFS_TOKENS = 8
"""Room kept for the header's "(refs of N: offload entries)"."""
