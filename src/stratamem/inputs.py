"""Checks every caller's text and JSON passes where it enters, so that no input can fail later.

- Text must be encodable as UTF-8: a lone surrogate (`"\\ud800"` in JSON) is refused, since no
  store, log or response could write it.
- Nested objects and arrays are bounded to `MAX_NESTING` levels (a request body counts as one):
  deeper documents are refused instead of exhausting a serializer's recursion.
- Conversation text is normalised to NFC, so the composed and decomposed forms of one text
  (`"é"` as one code point or as `e` + a combining accent) are one turn and one memory.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from stratamem.errors import InvalidInput

MAX_NESTING = 32
"""Most levels of objects and arrays one input may have (a request body is the first)."""


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
    """Refuse (`InvalidInput`) a JSON value with text that is not UTF-8 (in a key or a string)
    or with more than `max_nesting` levels of objects and arrays."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, what)
        elif isinstance(item, dict | list | tuple):
            if depth > max_nesting:
                raise InvalidInput(
                    f"{what} is nested more than {max_nesting} levels deep (objects and arrays)"
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        check_text(key, what)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
