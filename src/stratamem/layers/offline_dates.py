"""Relative dates in a sentence, resolved against the time of the turn that says them.

"yesterday", "today", "tomorrow", "last week", "last month", "last year", "two days ago",
"3 weeks ago", "last Friday", "on Monday" (the most recent such day, the turn's day excluded),
"next week", "next month", "next year", "next Monday" (the coming such day).
Dates are UTC days; the result is the start of that day in epoch seconds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from stratamem.timestamps import utc

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3,
}  # fmt: skip
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_NUMBER = r"(?P<n>\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_AGO = re.compile(_NUMBER + r"\s+(?P<unit>day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_LAST_UNIT = re.compile(r"\b(?:last|past)\s+(?P<unit>week|month|year)\b", re.IGNORECASE)
_NEXT_UNIT = re.compile(r"\bnext\s+(?P<unit>week|month|year)\b", re.IGNORECASE)
_NEXT_WEEKDAY = re.compile(r"\bnext\s+(?P<day>" + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE)
_WEEKDAY = re.compile(
    r"\b(?:last|on|this past)\s+(?P<day>" + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE
)
_SINGLE = {"yesterday": -1, "today": 0, "tonight": 0, "this morning": 0, "tomorrow": 1}
_SINGLE_RE = re.compile(r"\b(" + "|".join(_SINGLE) + r")\b", re.IGNORECASE)


def _start_of_day(moment: datetime) -> float:
    return datetime(moment.year, moment.month, moment.day, tzinfo=UTC).timestamp()


def resolve_relative_date(sentence: str, turn_time: float) -> float | None:
    """The day a sentence's relative date refers to, or None when it names none."""
    base = utc(turn_time)
    if base is None:  # a stored time no calendar can show: no date to resolve against
        return None
    for finder in (_single, _ago, _last_unit, _next_unit, _weekday, _next_weekday):
        days = finder(sentence, base)
        if days is not None:
            try:
                return _start_of_day(base + timedelta(days=days))
            except OverflowError:
                return None
    return None


def _single(sentence: str, base: datetime) -> int | None:
    found = _SINGLE_RE.search(sentence)
    return None if found is None else _SINGLE[found.group(1).lower()]


def _ago(sentence: str, base: datetime) -> int | None:
    found = _AGO.search(sentence)
    if found is None:
        return None
    raw = found.group("n").lower()
    count = int(raw) if raw.isdigit() else _NUMBERS[raw]
    return -count * _UNIT_DAYS[found.group("unit").lower()]


def _last_unit(sentence: str, base: datetime) -> int | None:
    found = _LAST_UNIT.search(sentence)
    return None if found is None else -_UNIT_DAYS[found.group("unit").lower()]


def _weekday(sentence: str, base: datetime) -> int | None:
    found = _WEEKDAY.search(sentence)
    if found is None:
        return None
    wanted = _WEEKDAYS.index(found.group("day").lower())
    back = (base.weekday() - wanted) % 7
    return -(back or 7)


def _next_unit(sentence: str, base: datetime) -> int | None:
    found = _NEXT_UNIT.search(sentence)
    return None if found is None else _UNIT_DAYS[found.group("unit").lower()]


def _next_weekday(sentence: str, base: datetime) -> int | None:
    found = _NEXT_WEEKDAY.search(sentence)
    if found is None:
        return None
    wanted = _WEEKDAYS.index(found.group("day").lower())
    return (wanted - base.weekday()) % 7 or 7
