"""Retry of HTTP calls on 429 and 5xx, honouring Retry-After, with injected sleep and clock.

Shared by the OpenAI-compatible embedder and the LLM client. It retries only what a server says
is worth retrying (429, 5xx) and never waits longer than the policy allows: when a server asks for
a longer pause than `max_delay_s`, the last response is handed back at once and the caller raises
its typed error (the pipeline retries the task later, with its own backoff).
"""

from __future__ import annotations

import asyncio
import email.utils
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from stratamem.clock import Clock, SystemClock

Sleep = Callable[[float], Awaitable[None]]
"""How to wait `seconds`; tests pass a function that records the delay and returns at once."""

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries: at most `max_attempts` requests, no single wait over `max_delay_s`."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("retry delays must not be negative")

    def backoff_s(self, attempt: int) -> float:
        """Exponential delay after failed attempt number `attempt` (1-based), capped."""
        return float(min(self.base_delay_s * 2 ** (attempt - 1), self.max_delay_s))


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), or None."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_s)


async def send_with_retry(
    send: Callable[[], Awaitable[httpx.Response]],
    policy: RetryPolicy,
    *,
    sleep: Sleep = asyncio.sleep,
    clock: Clock | None = None,
    retry_on: frozenset[int] = RETRYABLE_STATUS,
) -> httpx.Response:
    """Call `send` until it returns a response whose status is not in `retry_on` (by default
    429 and 5xx), or retrying must stop.

    Returns the last response in every case; the caller checks its status. Transport errors
    (timeouts, refused connections) propagate unchanged: they are not retried here.
    """
    now = (clock or SystemClock()).now
    attempt = 1
    while True:
        response = await send()
        if response.status_code not in retry_on or attempt >= policy.max_attempts:
            return response
        delay_s = _delay_for(response, attempt, policy, now())
        if delay_s is None:
            return response
        await response.aclose()
        await sleep(delay_s)
        attempt += 1


def _delay_for(
    response: httpx.Response, attempt: int, policy: RetryPolicy, now_s: float
) -> float | None:
    """The wait before the next attempt, or None when the server asks for more than allowed."""
    asked_s = parse_retry_after(response.headers.get("retry-after"), now_s)
    if asked_s is None:
        return policy.backoff_s(attempt)
    if asked_s > policy.max_delay_s:
        return None
    return asked_s
