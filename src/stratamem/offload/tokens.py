"""A simple deterministic token estimator for compaction and read-back caps.

One token per four characters (as `stratamem.llm.wire.estimate_tokens`), plus a fixed overhead
per chat message for its role and separators. Deterministic so budgets are reproducible.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.llm.wire import estimate_tokens

MESSAGE_OVERHEAD_TOKENS = 4


def text_tokens(text: str) -> int:
    return estimate_tokens(len(text))


def message_tokens(message: Mapping[str, Any]) -> int:
    content = message.get("content")
    chars = len(content) if isinstance(content, str) else len(json.dumps(content or ""))
    calls = message.get("tool_calls")
    if calls:
        chars += len(json.dumps(calls, ensure_ascii=False))
    return MESSAGE_OVERHEAD_TOKENS + estimate_tokens(chars)


def context_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(message_tokens(m) for m in messages)
