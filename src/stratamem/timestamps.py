"""The range of times stratamem accepts, and showing a stored time without ever failing.

A time outside 1900-01-01 .. 2200-01-01 UTC (epoch seconds `MIN_TIMESTAMP_S` ..
`MAX_TIMESTAMP_S`) is refused where it enters (capture, tool results, user messages, dates an
LLM names): such a time is almost always a unit mistake (milliseconds for seconds) or a hostile
input, and `datetime` cannot even show years past 9999. A record stored before this check, or
written by another program, is still shown: `utc` answers None for it instead of raising.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from stratamem.errors import InvalidInput

MIN_TIMESTAMP_S = -2_208_988_800.0
"""1900-01-01T00:00:00Z, the earliest accepted time."""
MAX_TIMESTAMP_S = 7_258_118_400.0
"""2200-01-01T00:00:00Z, the latest accepted time."""
RANGE_TEXT = "1900-01-01 to 2200-01-01 UTC"


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
