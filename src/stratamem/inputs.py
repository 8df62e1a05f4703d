"""Checks every caller's text and JSON passes where it enters, so that no input can fail later.

- Text must be encodable as UTF-8: a lone surrogate (`"\\ud800"` in JSON) is refused, since no
  store, log or response could write it.
- Nested objects and arrays are bounded to `MAX_NESTING` levels (a request body counts as one):
  deeper documents are refused instead of exhausting a serializer's recursion.
- Numbers are JSON's: NaN and infinities (which Python's JSON reader takes, and `1e400` becomes)
  are refused, and so are integers beyond 64 bits (no store or client keeps them exactly).
- Conversation text is normalised to NFC, so the composed and decomposed forms of one text
  (`"é"` as one code point or as `e` + a combining accent) are one turn and one memory.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from stratamem.errors import InvalidInput

MAX_NESTING = 32
"""Most levels of objects and arrays one input may have (a request body is the first)."""
MAX_INTEGER = 2**63 - 1
"""Largest integer magnitude accepted in caller JSON (a signed 64-bit integer)."""


def check_text(text: str, what: str) -> str:
    """`text` when it is encodable as UTF-8, else `InvalidInput` naming `what`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{what} has a character that is not valid Unicode text (a lone surrogate at"
            f" position {exc.start}): send UTF-8 text"
        ) from exc
    return text


def nfc(text: str, what: str) -> str:
    """`text` checked (`check_text`) and normalised to NFC."""
    return unicodedata.normalize("NFC", check_text(text, what))


def check_json(value: Any, what: str, max_nesting: int = MAX_NESTING) -> None:
    """Refuse (`InvalidInput`, naming the place in `value`) a JSON value with text that is not
    UTF-8 (in a key or a string), a number JSON does not have (NaN, an infinity), an integer
    beyond 64 bits, or more than `max_nesting` levels of objects and arrays."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            check_text(item, _at(what, path))
        elif isinstance(item, float | int) and not isinstance(item, bool):
            _check_number(item, _at(what, path))
        elif isinstance(item, dict | list | tuple):
            if depth > max_nesting:
                raise InvalidInput(
                    f"{what} is nested more than {max_nesting} levels deep (objects and arrays)"
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        check_text(key, _at(what, path))
                    stack.append((child, depth + 1, f"{path}.{key}" if path else str(key)))
            else:
                stack.extend((c, depth + 1, f"{path}[{i}]") for i, c in enumerate(item))


def _at(what: str, path: str) -> str:
    return f"{what} at {path}" if path else what


def _check_number(number: float, what: str) -> None:
    if isinstance(number, float) and not math.isfinite(number):
        raise InvalidInput(
            f"{what} is {number!r}, which is not a JSON number (NaN, Infinity or beyond"
            " ±1.8e308): send a finite number, or the value as a string"
        )
    if isinstance(number, int) and abs(number) > MAX_INTEGER:
        raise InvalidInput(
            f"{what} is an integer of {number.bit_length()} bits, beyond the 64 bits accepted:"
            " send it as a string"
        )
