"""Query-side time: the dates a query names, as a window of time to search in.

"What dish did Nate make on 9 November, 2022?", "Where was Tim the week before 16 November
2023?", "Which tournament did Nate win in November 2022?" name a day, a week or a month. A turn
that talks about it was said in that period, or in the days around it: people tell of what they
did afterwards ("I made pasta last Tuesday") and of what they plan beforehand ("we fly to
Orlando in September"). So the window runs from `SLACK_DAYS` before the named period to
`SLACK_DAYS` after it, and the search adds the query's BM25 restricted to it as one more
candidate list (`search.py`): turns said then that match the words rank first there.

Understood: a day ("9 November 2022", "9th November, 2022", "November 9, 2022", "2022-11-09"),
a month ("November 2022", "November, 2022"), a year ("in 2023"), each optionally after "the
week / weekend / <weekday> / day / month before" or "after". A month or weekday without a year is
not resolved (the dates' words in the turns' index still match it). Times are UTC days, like the
`dated` words of the index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

#: Days before and after a named period in which a turn may still tell of it.
SLACK_DAYS = 7

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
            ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
            ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_RELATION = (
    r"(?:(?P<unit>week|weekend|day|month|monday|tuesday|wednesday|thursday|friday|saturday"
    r"|sunday)\s+(?P<side>before|after|of)\s+)?"
)
_PATTERNS = [
    re.compile(rf"\b{_RELATION}{_DAY}\s*{_MONTH}\s*,?\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_RELATION}{_MONTH}\s*{_DAY}\s*,\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_RELATION}{_MONTH}\s+{_DAY}\s+{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_RELATION}(?P<iso>{_YEAR}-(?P<m>\d\d)-(?P<d>\d\d))\b", re.IGNORECASE),
    re.compile(rf"\b{_RELATION}{_MONTH}\s*,?\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b(?:in|during|of|since)\s+{_YEAR}\b", re.IGNORECASE),
]


@dataclass(frozen=True, slots=True)
class Window:
    """A span of time, epoch seconds [since, until)."""

    since: float
    until: float


def time_window(query: str, slack_days: float = SLACK_DAYS) -> Window | None:
    """The span covering every period `query` names, widened by `slack_days` on each side; or
    None."""
    periods: list[tuple[date, date]] = []
    taken: list[tuple[int, int]] = []
    for pattern in _PATTERNS:
        for match in pattern.finditer(query):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue  # already read as a more precise date
            period = _period(match)
            if period is not None:
                periods.append(period)
                taken.append(match.span())
    if not periods:
        return None
    first = min(p[0] for p in periods) - timedelta(days=slack_days)
    last = max(p[1] for p in periods) + timedelta(days=slack_days)
    return Window(_epoch(first), _epoch(last))


def _period(match: re.Match[str]) -> tuple[date, date] | None:
    """The days [first, end) the match names, or None when it is no real date."""
    groups = match.groupdict()
    try:
        if groups.get("iso"):
            day = date(int(groups["year"]), int(groups["m"]), int(groups["d"]))
            return _related(day, day + timedelta(days=1), groups)
        year = int(groups["year"])
        if groups.get("month") is None:
            return date(year, 1, 1), date(year + 1, 1, 1)
        month = _MONTHS[groups["month"].lower()]
        if groups.get("day") is None:
            end = date(year + month // 12, month % 12 + 1, 1)
            return _related(date(year, month, 1), end, groups)
        day = date(year, month, int(groups["day"]))
    except ValueError:
        return None  # "31 February 2023"
    return _related(day, day + timedelta(days=1), groups)


def _related(first: date, end: date, groups: dict[str, str | None]) -> tuple[date, date]:
    """The period a relation names around [first, end): "the week before X" is the 7 days
    before X (and X itself: what a conversation on X calls "last week")."""
    unit, side = (groups.get("unit") or "").lower(), (groups.get("side") or "").lower()
    if unit == "week" and side == "of":
        monday = first - timedelta(days=first.weekday())
        return monday, max(end, monday + timedelta(days=7))
    if not unit or side == "of":
        return first, end
    span = timedelta(days=31 if unit == "month" else 1 if unit == "day" else 7)
    if side == "before":
        return first - span, end
    return first, end + span


def _epoch(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
