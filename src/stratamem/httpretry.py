"""Retry of HTTP calls on 429 and 5xx, honouring Retry-After, with injected sleep and clock.

Shared by the OpenAI-compatible embedder and the LLM client. It retries only what a server says
is worth retrying (429, 5xx) and never waits longer than the policy allows: when a server asks for
a longer pause than `max_delay_s`, the last response is handed back at once and the caller raises
its typed error (the pipeline retries the task later, with its own backoff).
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from stratamem.clock import Clock, SystemClock

Sleep = Callable[[float], Awaitable[None]]
"""How to wait `seconds`; tests pass a function that records the delay and returns at once."""

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

#: A URL in a text: a scheme, `://`, and what follows up to white space or a quote (trailing
#: punctuation of the sentence left out).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*[^\s'\"<>`.,;:)\]}]")
TENANT_ENDPOINT = "the endpoint"
"""What a tenant sees in place of a URL: where a stage's endpoint is, is the operator's business."""


def redact_url(url: str) -> str:
    """`url` as scheme://host[:port]: no user or password, path, query or fragment (any of
    them may carry a credential), for errors and logs that operators read."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a port that is not a number, a broken IPv6 address
        return f"{url.partition('://')[0]}://(unreadable address)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")


def scrub_reply(text: str, url: str, *secrets: str | None) -> str:
    """An endpoint's error reply as an error message may quote it: URLs redacted, and the
    credentials of `url` (password, query values) and `secrets` (an API key) cut out, in case
    the reply echoes the request it refuses."""
    parts = urlsplit(url)
    known = [parts.password, *(v for _, _, v in (q.partition("=") for q in parts.query.split("&"))),
             *secrets]  # fmt: skip
    for secret in sorted({k for k in known if k and len(k) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "(redacted)")
    return redact_urls(text)


def redact_urls(text: str, *, for_tenant: bool = False) -> str:
    """`text` with every URL in it redacted: to scheme://host[:port] (`redact_url`) for
    operators, or, `for_tenant`, to "the endpoint" (a tenant learns no internal address)."""
    if "://" not in text:
        return text
    if for_tenant:
        return _URL_IN_TEXT.sub(TENANT_ENDPOINT, text)
    return _URL_IN_TEXT.sub(lambda found: redact_url(found.group(0)), text)


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
