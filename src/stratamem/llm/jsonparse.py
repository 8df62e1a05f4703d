"""Reading a model's reply as JSON, strictly: the reply is one JSON value and nothing else.

Accepted: the whole text (surrounding whitespace and a byte-order mark ignored), or the whole
text being one code fence (```` ```json … ``` ````) around one value. Anything else is an error,
typed, that the client sends back to the model in its repair round: prose around the value, an
object inside prose, two values, two fences. An inner `{…}` picked out of prose once read a
reply that meant something else as "nothing to do" (issue 11, finding 1); it never is now.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ONE_FENCE = re.compile(r"\A```[ \t]*(?:json|JSON|jsonc)?[ \t]*\n?(?P<body>.*?)\n?[ \t]*```\Z",
                        re.DOTALL)  # fmt: skip
_EXCERPT_CHARS = 80


class NoJSONFound(ValueError):
    """The reply is not one JSON value: empty, not JSON, or JSON among other text."""


class JSONAmongText(NoJSONFound):
    """The reply holds a JSON value, but with prose, another value or another fence around it."""


def extract_json(text: str) -> Any:
    """The one JSON value `text` is (see the module doc); raises `NoJSONFound` (or its
    `JSONAmongText`) saying what is wrong."""
    stripped = text.strip().lstrip("\ufeff").strip()
    if not stripped:
        raise NoJSONFound("the reply is empty")
    fence = _ONE_FENCE.match(stripped)
    candidate = fence.group("body").strip() if fence and "```" not in fence.group("body") else None
    try:
        return json.loads(candidate if candidate is not None else stripped)
    except ValueError as exc:
        raise _why_not(stripped, exc) from exc


def _why_not(text: str, exc: ValueError) -> NoJSONFound:
    excerpt = text[:_EXCERPT_CHARS].replace("\n", " ")
    if _holds_value(text):
        return JSONAmongText(
            "the reply must be one JSON value and nothing else (no prose, no second value), "
            f"but it has text around its JSON (it begins {excerpt!r})"
        )
    return NoJSONFound(f"the reply is not valid JSON ({exc}; it begins {excerpt!r})")


def _holds_value(text: str) -> bool:
    """Whether some `{` or `[` of `text` opens a complete JSON value (bounded search)."""
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text) if ch in "{["][:200]
    for start in starts:
        try:
            decoder.raw_decode(text, start)
        except ValueError:
            continue
        return True
    return False
