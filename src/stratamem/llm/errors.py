"""Typed LLM errors: every one is an `LLMError` (a `StratamemError`), raised `from` its cause."""

from __future__ import annotations

import re

from stratamem.errors import LLMError, Postponed, Throttled

DEFAULT_POSTPONE_S = 30.0
"""How long work waits after endpoint trouble when the client names no wait (the breaker's
default cool-down)."""


class LLMEndpointTrouble(LLMError, Postponed):
    """The endpoint is in trouble, not the reply: it could not be reached, did not answer in
    time, or answered a 5xx. Counted by the endpoint's circuit breaker; work that needs it is
    postponed for `retry_after_s` (the pipeline spends no attempt, no turn is quarantined)."""

    def __init__(self, message: str, *, retry_after_s: float = DEFAULT_POSTPONE_S) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


class LLMUnavailable(LLMEndpointTrouble):
    """The endpoint could not be reached (refused connection, broken transport)."""


class LLMTimeout(LLMUnavailable):
    """The endpoint did not answer within the stage's timeout."""


class LLMCircuitOpen(LLMEndpointTrouble):
    """The endpoint's circuit breaker is open (its last calls failed in transport or timed
    out): no request was sent. Not the reply's fault, so never an `LLMOutputInvalid`."""


class LLMHTTPError(LLMError):
    """The endpoint answered with an HTTP error status (after any retries)."""

    def __init__(self, message: str, *, status: int, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class LLMServerError(LLMHTTPError, LLMEndpointTrouble):
    """The endpoint answered 500, 502, 504 or a 503 that does not ask to wait (after the
    client's own retries): the server, or the proxy in front of it, is in trouble."""

    def __init__(self, message: str, *, status: int, body: str = "", retry_after_s: float) -> None:
        LLMEndpointTrouble.__init__(self, message, retry_after_s=retry_after_s)
        self.status = status
        self.body = body


class LLMRateLimited(LLMHTTPError, Throttled):
    """The endpoint kept answering 429 (or 503 with Retry-After) past the client's own retries,
    or asked for a longer wait than they allow; `retry_after_s` is the wait it asked for."""

    def __init__(
        self, message: str, *, status: int, body: str = "", retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after_s = retry_after_s


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


class LLMReplyTruncated(LLMOutputInvalid):
    """The model stopped before finishing its reply (`finish_reason: "length"`: it hit
    `max_tokens` or its context). Never read as an answer, and not repaired (a repair would be
    cut off too): the caller retries with a smaller input."""


_TROUBLE_TEXT = re.compile(
    r"^(LLMUnavailable|LLMTimeout|LLMCircuitOpen|LLMServerError|LLMRateLimited|LLMEndpointTrouble):"
    r"|^LLMHTTPError: .*\banswered HTTP 5\d\d\b",  # a 5xx dead-lettered before it was trouble
    re.DOTALL,
)


def names_endpoint_trouble(error: str) -> bool:
    """Whether an error's text (`"<type>: <message>"`, as a dead letter keeps it) is an
    endpoint's trouble (down, timing out, 5xx, rate limited) rather than the work's fault."""
    return _TROUBLE_TEXT.match(error) is not None
