"""The LLM contract the memory stages depend on, so they take any implementation."""

from __future__ import annotations

from typing import Protocol, TypeVar

from pydantic import BaseModel

from stratamem.llm.usage import UsageMeter
from stratamem.llm.wire import Messages

M = TypeVar("M", bound=BaseModel)


class LLM(Protocol):
    """Chat completion for named stages (`L1`, `L2`, `offload-l15` …).

    - `complete_json` returns the reply validated as `schema`; after one repair round it raises
      `LLMOutputInvalid` (raw replies kept).
    - `complete_text` returns the reply text; an empty reply raises `LLMEmptyReply`.
    - Transport, timeout and HTTP failures raise `LLMUnavailable`, `LLMTimeout`, `LLMHTTPError`
      (429/5xx are retried first). All are `LLMError`s.
    - `usage` counts calls and tokens per stage.
    """

    usage: UsageMeter

    async def complete_json(
        self, stage: str, messages: Messages, schema: type[M], *, max_tokens: int | None = None
    ) -> M: ...

    async def complete_text(
        self, stage: str, messages: Messages, *, max_tokens: int | None = None
    ) -> str: ...

    async def aclose(self) -> None: ...
