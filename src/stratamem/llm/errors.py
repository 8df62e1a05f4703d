"""Typed LLM errors: every one is an `LLMError` (a `StratamemError`), raised `from` its cause."""

from __future__ import annotations

from stratamem.errors import LLMError


class LLMUnavailable(LLMError):
    """The endpoint could not be reached (refused connection, broken transport)."""


class LLMTimeout(LLMUnavailable):
    """The endpoint did not answer within the stage's timeout."""


class LLMHTTPError(LLMError):
    """The endpoint answered with an HTTP error status (after any retries)."""

    def __init__(self, message: str, *, status: int, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class LLMOutputInvalid(LLMError):
    """The reply could not be used: not a completion, no JSON, or not valid for the schema.

    `raw` is the last reply text; `raws` every reply text of the call (first try, repair).
    """

    def __init__(self, message: str, *, raw: str, raws: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.raw = raw
        self.raws = raws or (raw,)


class LLMEmptyReply(LLMOutputInvalid):
    """The reply had no content at all."""
