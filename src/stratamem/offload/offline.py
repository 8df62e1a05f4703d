"""Offline mode: deterministic summaries and scores without an LLM.

A summary is the call (tool and parameters, shortened) and the head of its output with
whitespace collapsed; its score is the share of the output it keeps, on 0-10, so an output that
fits whole scores 10 and a long one scores low (read it back through its ref).
"""

from __future__ import annotations

import json
import re

from stratamem.domain import Mode
from stratamem.store.offload.records import NewEntry, ToolPair

_SPACE = re.compile(r"\s+")
_PARAMS_CHARS = 80
NEEDS_LLM = (
    "task diagrams need an LLM: set STRATAMEM_LLM_BASE_URL and STRATAMEM_LLM_MODEL"
    " (offload-l2 makes them)"
)


def squash(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def shorten(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars`, marked with an ellipsis when cut."""
    return text if len(text) <= max_chars else text[: max(0, max_chars - 1)].rstrip() + "…"


def call_line(pair: ToolPair) -> str:
    params = json.dumps(pair.params, ensure_ascii=False, sort_keys=True)
    return f"{pair.tool}({shorten(params, _PARAMS_CHARS)})"


def offline_entry(pair: ToolPair, max_chars: int, cap_score: int | None = None) -> NewEntry:
    """The deterministic entry of `pair`; `cap_score` bounds its score (fallback entries)."""
    head = f"{call_line(pair)} → "
    body = squash(pair.output)
    room = max(10, max_chars - len(head))
    summary = head + shorten(body, room)
    kept = min(len(body), room)
    score = 10 if not body or kept >= len(body) else min(9, (10 * kept) // len(body))
    if cap_score is not None:
        score = min(score, cap_score)
    return NewEntry(pair=pair, summary=summary[:max_chars], score=score, mode=Mode.OFFLINE)
