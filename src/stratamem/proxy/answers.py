"""What the proxy answers a client, before it becomes an HTTP response: a whole body with its
status (the upstream's, or an error in OpenAI's shape), or a stream of server-sent events."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Upstream headers a client may act on (when to retry, how much is left); others stay here.
PASSED_HEADERS = ("retry-after", "retry-after-ms")
PASSED_PREFIXES = ("x-ratelimit-",)


@dataclass(frozen=True, slots=True)
class WholeAnswer:
    """A body sent as it is, with its status and content type."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    media_type: str = "application/json"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body as JSON (None when it is not JSON)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    """Server-sent events, each forwarded as soon as it is whole. `events` must be closed
    (`aclose`) when the client goes away, which ends the upstream call."""

    events: AsyncGenerator[bytes, None]
    headers: Mapping[str, str] = field(default_factory=dict)


Answer = WholeAnswer | StreamAnswer


def openai_error(status: int, kind: str, message: str) -> WholeAnswer:
    """An error in OpenAI's shape (`error.message`, `type`, `param`, `code`)."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return WholeAnswer(status, json.dumps(body).encode())


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream's headers a client may act on."""
    return {
        name: value for name, value in headers.items()
        if name.lower() in PASSED_HEADERS or name.lower().startswith(PASSED_PREFIXES)
    }  # fmt: skip


def upstream_error(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    shape: Callable[[int, str, str], WholeAnswer] = openai_error,
) -> WholeAnswer:
    """An upstream's error answer with its status: its body when it is in an error shape (an
    object with an `error`, as OpenAI's and Anthropic's are), else wrapped in `shape`."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict | str):
        return WholeAnswer(status, body, passed_headers(headers))
    text = body.decode("utf-8", "replace").strip()[:2000] or f"the upstream answered {status}"
    wrapped = shape(status, "upstream_error", text)
    return WholeAnswer(status, wrapped.body, passed_headers(headers))
