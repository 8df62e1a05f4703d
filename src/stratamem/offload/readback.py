"""Read-back of a ref: the original tool result, or the slice around a query, within a cap."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from stratamem.store.offload.records import Ref

CHARS_PER_TOKEN = 4
_TERM = re.compile(r"\w{2,}")
_MAX_HITS = 2000


@dataclass(frozen=True, slots=True)
class ReadBack:
    ref_id: str
    call_id: str
    tool: str
    text: str
    start: int
    end: int
    total_chars: int

    @property
    def complete(self) -> bool:
        return self.start == 0 and self.end == self.total_chars

    def to_json(self) -> dict[str, Any]:
        return {
            "ref_id": self.ref_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "start": self.start,
            "end": self.end,
            "total_chars": self.total_chars,
            "complete": self.complete,
            "text": self.text,
        }


def read_slice(ref: Ref, max_tokens: int, query: str | None = None) -> ReadBack:
    """The whole content if it fits `max_tokens`; else the window densest in the query's terms
    (the head without a query or without a match)."""
    content = ref.content
    width = max(1, max_tokens * CHARS_PER_TOKEN)
    start = 0
    if len(content) > width and query:
        start = _best_start(content, query, width)
    end = min(len(content), start + width)
    return ReadBack(ref.ref_id, ref.call_id, ref.tool, content[start:end], start, end, len(content))


def _best_start(content: str, query: str, width: int) -> int:
    terms = {t.lower() for t in _TERM.findall(query)}
    lowered = content.lower()
    hits = sorted(m.start() for term in terms for m in re.finditer(re.escape(term), lowered))[
        :_MAX_HITS
    ]
    if not hits:
        return 0
    best, best_count, right = hits[0], 0, 0
    for left, position in enumerate(hits):
        right = max(right, left)
        while right < len(hits) and hits[right] < position + width // 2:
            right += 1
        if right - left > best_count:
            best, best_count = position, right - left
    start = max(0, best - width // 4)
    line_start = content.rfind("\n", 0, start)
    if line_start != -1 and start - line_start < width // 8:
        start = line_start + 1
    return min(start, max(0, len(content) - width))
