"""Rendering recalled memories into prompt blocks within character budgets.

Blocks are wrapped in tags that capture strips, so recalled text is never captured back.
"""

from __future__ import annotations

from collections.abc import Sequence

from stratamem.domain import Hit, Layer
from stratamem.timestamps import utc_text

RECALL_TAG = "stratamem-recall"
PROFILE_TAG = "stratamem-profile"


def _date(timestamp: float | None) -> str:
    return utc_text(timestamp, "%Y-%m-%d")


def hit_line(hit: Hit) -> str:
    date = _date(hit.timestamp)
    if hit.layer is Layer.L1:
        kind = hit.memory_type.value if hit.memory_type else "memory"
        return f"- [{kind}{', ' + date if date else ''}] {hit.text}"
    who = f"{hit.speaker}: " if hit.speaker else ""
    return f"- [said{', ' + date if date else ''}] {who}{hit.text}"


def render_recall(hits: Sequence[Hit], budget_chars: int) -> str:
    """The per-turn block: one line per hit, best first, cut to fit the budget."""
    header = f"<{RECALL_TAG}>\nRelevant memories (most relevant first):\n"
    footer = f"</{RECALL_TAG}>"
    return _fit(header, [hit_line(h) for h in hits], footer, budget_chars)


def render_stable(profile: str | None, scene_lines: Sequence[str], budget_chars: int) -> str:
    """The stable block: the profile and the scene index, for a cacheable system prompt."""
    if not profile and not scene_lines:
        return ""
    header = f"<{PROFILE_TAG}>\n"
    footer = f"</{PROFILE_TAG}>"
    lines: list[str] = []
    if profile:
        lines.append("User profile:\n" + profile.strip())
    if scene_lines:
        lines.append("Scenes:")
        lines.extend(f"- {line}" for line in scene_lines)
    return _fit(header, lines, footer, budget_chars)


def _fit(header: str, lines: Sequence[str], footer: str, budget_chars: int) -> str:
    """Whole lines while they fit; a last line is cut with an ellipsis rather than dropped."""
    if not lines:
        return ""
    room = budget_chars - len(header) - len(footer)
    if room <= 0:
        return ""
    body: list[str] = []
    for line in lines:
        cost = len(line) + 1
        if cost <= room:
            body.append(line)
            room -= cost
            continue
        if room > 40:
            body.append(line[: room - 2] + "…")
        break
    if not body:
        return ""
    return header + "\n".join(body) + "\n" + footer
