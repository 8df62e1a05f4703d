"""Mermaid flowcharts from an LLM, validated before they are stored.

Accepted: a `flowchart`/`graph` header with a direction, then one statement per line: a node
(`id`, `id["label"]`, `id(label)`, `id{label}` …), an edge chain (`a --> b`, `a -->|why| b`,
`---`, `-.->`, `==>`), `subgraph id`/`end`, or a `%%` comment. Anything else (`click`, `style`,
`classDef`, HTML, quotes inside labels) is refused, as is a diagram over its size bounds.
Edits replace line ranges of the current text; they are applied bottom-up and may not overlap.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from stratamem.errors import InvalidInput

_HEADER = re.compile(r"^(?:flowchart|graph)\s+(?:TD|TB|BT|LR|RL)$")
_ID = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
_LABEL = r"[^\"\[\]{}()|<>`\n]{0,120}"
_SHAPE = (
    rf"(?:\[\"{_LABEL}\"\]|\[{_LABEL}\]|\(\(\"?{_LABEL}\"?\)\)|\(\"{_LABEL}\"\)|\({_LABEL}\)"
    rf"|\{{\"?{_LABEL}\"?\}})"
)
_NODE = re.compile(rf"(?P<id>{_ID})\s*{_SHAPE}?")
_ARROW = re.compile(r"\s*(?:-->|---|-\.->|==>)(?:\|[^|\"\n<>`]{0,80}\|)?\s*")
_SUBGRAPH = re.compile(rf"^subgraph\s+{_ID}(?:\s*\[{_LABEL}\])?$")
_RESERVED = frozenset({"end", "subgraph", "graph", "flowchart", "click", "style", "classdef"})

HEADER = "flowchart TD"
INDENT = "    "


class InvalidDiagram(InvalidInput):
    """A Mermaid text or an edit of it that is refused; the message says why."""


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace lines `start`..`end` (1-based, inclusive) by `lines`; `end = start - 1` inserts."""

    start: int
    end: int
    lines: tuple[str, ...]


def validate(text: str, max_lines: int, max_chars: int) -> tuple[str, frozenset[str]]:
    """The diagram in canonical form (statements indented) and its node ids; or raise."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or not _HEADER.match(lines[0]):
        raise InvalidDiagram("the first line must be a flowchart header such as `flowchart TD`")
    nodes: set[str] = set()
    depth = 0
    for number, line in enumerate(lines[1:], start=2):
        depth = _statement(line, number, nodes, depth)
    if depth != 0:
        raise InvalidDiagram("a `subgraph` is not closed by `end`")
    canonical = "\n".join([lines[0], *(INDENT + line for line in lines[1:])])
    if len(lines) > max_lines or len(canonical) > max_chars:
        raise InvalidDiagram(
            f"the diagram has {len(lines)} lines and {len(canonical)} characters;"
            f" at most {max_lines} lines and {max_chars} characters are kept"
        )
    return canonical, frozenset(nodes)


def _statement(line: str, number: int, nodes: set[str], depth: int) -> int:
    if line.startswith("%%"):
        return depth
    if _SUBGRAPH.match(line):
        return depth + 1
    if line == "end":
        if depth == 0:
            raise InvalidDiagram(f"line {number}: `end` without a `subgraph`")
        return depth - 1
    for part in _ARROW.split(line):
        match = _NODE.fullmatch(part.strip())
        if match is None or match["id"].lower() in _RESERVED:
            raise InvalidDiagram(f"line {number} is not a node or edge statement: {line[:120]!r}")
        nodes.add(match["id"])
    return depth


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """`text` with the line ranges replaced; refuses ranges out of bounds or overlapping."""
    lines = text.splitlines() if text.strip() else []
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    previous_end = 0
    for edit in ordered:
        if not (1 <= edit.start <= len(lines) + 1 and edit.start - 1 <= edit.end <= len(lines)):
            raise InvalidDiagram(
                f"edit {edit.start}-{edit.end} is outside the diagram's {len(lines)} lines"
            )
        if edit.start <= previous_end:
            raise InvalidDiagram(f"edit {edit.start}-{edit.end} overlaps an earlier edit")
        previous_end = max(previous_end, edit.end)
    for edit in reversed(ordered):
        lines[edit.start - 1 : edit.end] = list(edit.lines)
    return "\n".join(lines)


def numbered(text: str) -> str:
    """The diagram with 1-based line numbers, as the model is shown it."""
    if not text.strip():
        return "(empty: start with `flowchart TD`)"
    return "\n".join(f"{i:3d} | {line}" for i, line in enumerate(text.splitlines(), start=1))
