"""Finding the JSON in a model's reply: whole text, a code fence, or the first balanced value."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|jsonc)?[ \t]*\n?(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()
_MAX_STARTS = 200
"""Give up after this many candidate openings, so a pathological reply cannot cost seconds."""


class NoJSONFound(ValueError):
    """The text holds no JSON object or array."""


def extract_json(text: str, *, prefer_object: bool = False) -> Any:
    """The JSON value of `text`: the whole text, else the first fenced block that parses, else
    the first balanced object or array (after leading prose). Raises `NoJSONFound`.

    With `prefer_object`, an embedded object wins over an array that comes before it (prose such
    as "see [1]" does not hide the object a schema expects).
    """
    stripped = text.strip().lstrip("\ufeff")
    if not stripped:
        raise NoJSONFound("the reply is empty")
    for candidate in (stripped, *(m.group(1).strip() for m in _FENCE.finditer(stripped))):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return _first_embedded_value(stripped, "{" if prefer_object else "{[")


def _first_embedded_value(text: str, openers: str) -> Any:
    starts = [i for i, ch in enumerate(text) if ch in openers][:_MAX_STARTS]
    if openers != "{[":
        starts += [i for i, ch in enumerate(text) if ch == "["][:_MAX_STARTS]
    for start in starts:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            continue
        return value
    excerpt = text[:80].replace("\n", " ")
    raise NoJSONFound(f"no JSON object or array found in the reply (it begins {excerpt!r})")
