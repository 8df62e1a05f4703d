"""The range of times stratamem accepts, and showing a stored time without ever failing.

A time outside 1900-01-01 .. 2200-01-01 UTC (epoch seconds `MIN_TIMESTAMP_S` ..
`MAX_TIMESTAMP_S`) is refused where it enters (capture, tool results, user messages, dates an
LLM names): such a time is almost always a unit mistake (milliseconds for seconds) or a hostile
input, and `datetime` cannot even show years past 9999. A record stored before this check, or
written by another program, is still shown: `utc` answers None for it instead of raising.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone

from stratamem.errors import InvalidInput

MIN_TIMESTAMP_S = -2_208_988_800.0
"""1900-01-01T00:00:00Z, the earliest accepted time."""
MAX_TIMESTAMP_S = 7_258_118_400.0
"""2200-01-01T00:00:00Z, the latest accepted time."""
RANGE_TEXT = "1900-01-01 to 2200-01-01 UTC"

#: RFC 3339: a full date, or a date-time with seconds, a fraction of at most 9 digits and an
#: offset (`Z` or ±HH:MM; without one the time is taken as UTC). Nothing else of ISO 8601:
#: no week or ordinal dates, no basic format (`20240101`), no offset with seconds, no text after.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})?)?",
    re.ASCII,
)
RFC3339_TEXT = "RFC 3339 (2024-05-08T14:30:00Z, 2024-05-08T14:30:00+02:00 or 2024-05-08)"


def in_range(seconds: float) -> bool:
    return math.isfinite(seconds) and MIN_TIMESTAMP_S <= seconds <= MAX_TIMESTAMP_S


def check_timestamp(seconds: float, what: str) -> float:
    """`seconds` as a float when it is in the accepted range, else `InvalidInput` saying
    "`what` is outside the accepted range …" (so `what` names the value)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidInput(f"{what} must be epoch seconds")
    if not in_range(float(seconds)):
        raise InvalidInput(
            f"{what} is outside the accepted range ({RANGE_TEXT}, epoch seconds"
            f" {MIN_TIMESTAMP_S:.0f} to {MAX_TIMESTAMP_S:.0f})"
        )
    return float(seconds)


def parse_rfc3339(text: str, what: str) -> float:
    """Epoch seconds of an RFC 3339 date or date-time (`_RFC3339`) within the accepted range;
    else `InvalidInput` saying "`what` …" and what is accepted."""
    found = _RFC3339.fullmatch(text)
    if found is None:
        shown = text if len(text) <= 40 else f"{text[:40]}… ({len(text)} characters)"
        raise InvalidInput(f"{what} {shown!r} is not a time in {RFC3339_TEXT}, nor epoch seconds")
    year, month, day, hour, minute, second, fraction, offset = found.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                          int(second or 0), tzinfo=_zone(offset))  # fmt: skip
    except ValueError as exc:  # 2024-02-30, 25:00:00, an offset of 24 hours or more
        raise InvalidInput(f"{what} {text!r} is not a time: {exc}") from exc
    seconds = moment.timestamp() + (float(fraction) if fraction else 0.0)
    return check_timestamp(seconds, f"{what} {text!r}")


def _zone(offset: str | None) -> timezone:
    if offset is None or offset in "Zz":
        return UTC
    sign = -1 if offset[0] == "-" else 1
    return timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))


def utc(seconds: float | None) -> datetime | None:
    """The UTC time of `seconds`, or None when there is none or `datetime` cannot show it."""
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def utc_text(seconds: float | None, fmt: str, missing: str = "") -> str:
    """`seconds` formatted in UTC, or `missing` when there is no time it can show."""
    moment = utc(seconds)
    return missing if moment is None else moment.strftime(fmt)
