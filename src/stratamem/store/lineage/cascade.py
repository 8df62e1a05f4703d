"""Which memories a forget erases, and which it re-derives: pure, over the tenant's memories.

A memory's sources are its turns (`source_turn_ids`) and the memories it consumed (those whose
`superseded_by` names it). Walking the memories oldest first (a consumer is always newer than
what it consumed), a memory is *touched* when one of its turns is forgotten, when it consumed a
memory that goes, or when it was stated in an erased session without any turn. Of a touched
memory, its *withdrawn* turns are its forgotten turns and those it took from a consumed memory
that goes (all of an explicitly forgotten memory's turns: its fact is what goes). What is left
decides:
- no turn left: erased;
- some turns left: the memory goes too (its text may carry what was forgotten), and if it is
  current it is re-derived from the turns left (`Cascade.rederive`); a superseded one is not
  (its successor, touched as well, carries on).
Memories an explicit forget names take with them the versions they consumed (their history).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Node:
    """What the cascade reads of one memory."""

    id: str
    turns: tuple[str, ...]
    superseded_by: str | None
    session: str | None
    current: bool


@dataclass(slots=True)
class Cascade:
    erased: set[str] = field(default_factory=set)
    """Memories deleted (the re-derived ones among them)."""
    rederive: dict[str, list[str]] = field(default_factory=dict)
    """Current memories deleted, to be derived again from these turns (oldest first)."""
    withdrawn: dict[str, set[str]] = field(default_factory=dict)


def cascade(
    nodes: Sequence[Node],
    forgotten_turns: Iterable[str],
    forgotten_memories: Iterable[str] = (),
    sessions: Iterable[str] = (),
    existing_turns: Iterable[str] | None = None,
) -> Cascade:
    """`nodes` in the order they were written (oldest first)."""
    turns_gone, erased_sessions = set(forgotten_turns), set(sessions)
    alive = None if existing_turns is None else set(existing_turns) - turns_gone
    consumed: dict[str, list[str]] = {}
    for node in nodes:
        if node.superseded_by is not None:
            consumed.setdefault(node.superseded_by, []).append(node.id)
    explicit = _with_history(set(forgotten_memories), consumed)
    out = Cascade()
    for node in nodes:
        if node.id in explicit:
            out.erased.add(node.id)
            out.withdrawn[node.id] = set(node.turns)
            continue
        withdrawn = set(node.turns) & turns_gone
        touched = bool(withdrawn) or (node.session in erased_sessions and not node.turns)
        for source in consumed.get(node.id, ()):
            if source in out.erased:
                touched = True
                withdrawn |= out.withdrawn[source]
        if not touched:
            continue
        out.erased.add(node.id)
        out.withdrawn[node.id] = withdrawn
        left = [t for t in node.turns if t not in withdrawn and (alive is None or t in alive)]
        if left and node.current:
            out.rederive[node.id] = left
    return out


def _with_history(ids: set[str], consumed: dict[str, list[str]]) -> set[str]:
    found, frontier = set(), list(ids)
    while frontier:
        current = frontier.pop()
        if current not in found:
            found.add(current)
            frontier.extend(consumed.get(current, ()))
    return found


def reopened(nodes: Sequence[Node], out: Cascade) -> list[str]:
    """Memories that stay but were superseded by one that goes with nothing derived again in
    its place: valid again (the forgotten update is undone)."""
    by_id = {n.id: n for n in nodes}
    found = []
    for node in nodes:
        if node.id in out.erased or node.superseded_by is None:
            continue
        head = _chain_head(node.superseded_by, by_id)
        if node.superseded_by in out.erased and head not in out.rederive:
            found.append(node.id)
    return found


def successor_of(node_id: str, nodes: Sequence[Node]) -> str | None:
    by_id = {n.id: n for n in nodes}
    start = by_id[node_id].superseded_by
    return None if start is None else _chain_head(start, by_id)


def _chain_head(start: str, by_id: dict[str, Node]) -> str:
    seen = {start}
    current = start
    while (node := by_id.get(current)) is not None and node.superseded_by is not None:
        if node.superseded_by in seen:
            break
        current = node.superseded_by
        seen.add(current)
    return current
