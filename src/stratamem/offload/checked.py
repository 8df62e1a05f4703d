"""LLM replies checked beyond their schema (ids named against ids shown), repaired once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from stratamem.llm.base import LLM
from stratamem.llm.errors import LLMOutputInvalid
from stratamem.llm.wire import Messages, repair_messages

M = TypeVar("M", bound=BaseModel)
Check = Callable[[M], str | None]


async def complete_checked(
    llm: LLM, stage: str, messages: Messages, schema: type[M], check: Check[M]
) -> M:
    """The reply as `schema`, passing `check` (which returns what is wrong, or None).

    A reply that fails the check gets one repair round; a second failure raises
    `LLMOutputInvalid` with both raw replies.
    """
    first = await llm.complete_json(stage, messages, schema)
    problem = check(first)
    if problem is None:
        return first
    raw_first = first.model_dump_json()
    retry = repair_messages(messages, raw_first, problem)
    second = await llm.complete_json(stage, retry, schema)
    again = check(second)
    if again is None:
        return second
    raw_second = second.model_dump_json()
    raise LLMOutputInvalid(
        f"stage {stage}: the reply failed its check after a repair round: {again}",
        raw=raw_second,
        raws=(raw_first, raw_second),
    )
