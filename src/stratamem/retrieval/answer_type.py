"""Answer types: a question that asks for a time is answered by a text that carries one.

"When did Melanie run a charity race?" is answered by "I ran a charity race last Sunday", whose
date follows from when it was said; a turn about the race that names no time cannot date it.
Question answering systems have long matched the type a question asks for to the texts that
can hold it; here the type is time. When the query asks when (or how long ago, or in which
year / month …), hits whose text holds no time expression (a relative day, weekday, month,
year, "ago", "last / next / this week", a duration) have their fused score scaled down, the
way the speaker preference does (`speakers.py`). On LoCoMo's dev split, 81 % of the evidence
turns of temporal questions hold such an expression, against 15 % of all turns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from stratamem.domain import Hit

#: Score factor of a hit without a time expression when the query asks for a time (1: off).
NO_TIME_FACTOR = 1.0

_ASKS_TIME = re.compile(
    r"\b(?:when|how long(?: ago)?|what (?:date|day|year|month|time|week)"
    r"|which (?:date|day|year|month|week)|since when)\b",
    re.IGNORECASE,
)
_UNITS = (
    r"(?:days?|weeks?|weekends?|months?|years?|nights?|mornings?|evenings?|summer|winter"
    r"|spring|fall|autumn)"
)
_DAYS = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"
# "May" only beside a day number: alone it is mostly the verb.
_MONTHS = (
    r"(?:january|february|march|april|june|july|august|september|october|november|december"
    r"|\d{1,2}(?:st|nd|rd|th)?\s+may|may\s+\d{1,2})"
)
_TIME = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|recently|ago|since"
    rf"|(?:last|next|this|past|coming|every)\s+(?:{_UNITS}|{_DAYS})"
    rf"|(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|few|couple of"
    rf"|several)\s+{_UNITS}"
    rf"|{_DAYS}|{_MONTHS}|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


def asks_time(query: str) -> bool:
    return _ASKS_TIME.search(query) is not None


def holds_time(text: str) -> bool:
    return _TIME.search(text) is not None


def prefer_timed(query: str, hits: Sequence[Hit], factor: float = NO_TIME_FACTOR) -> list[Hit]:
    """`hits` with the scores of those holding no time expression scaled by `factor` when
    `query` asks for a time, re-sorted (stable); unchanged otherwise."""
    if factor == 1.0 or not asks_time(query):
        return list(hits)
    rescored = [h if holds_time(h.text) else replace(h, score=h.score * factor) for h in hits]
    return sorted(rescored, key=lambda h: -h.score)
