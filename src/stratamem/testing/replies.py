"""Reply specs and request records of the scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from stratamem.llm.wire import STAGE_HEADER

STAGE_MARKER = re.compile(r"\[stage:\s*([A-Za-z0-9_.\-]+)\s*\]")
"""A marker a prompt may carry in its system message instead: `[stage: L1]`."""

DEFAULT_STAGE = "default"
EMBEDDINGS_STAGE = "embeddings"


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answers to one request. Build it with the class methods.

    `content` is the chat message content (None sends JSON `null`) and `finish_reason` why the
    model stopped (`"stop"`; `"length"` when cut off; None sends JSON `null`); `body` replaces
    the whole response body (a str is sent as-is, anything else as JSON); `vectors` answers an
    embeddings request; `hold` makes the server wait until `ScriptedLLM.release()` (or teardown)
    first; `disconnect` closes the connection without an answer.

    `tool_calls` are the assistant's calls, each `(id, name, arguments as JSON text)`. A request
    with `"stream": true` gets the same reply as server-sent events (`testing.streaming`):
    `chunks` are the content's pieces (default: one per word), `chunk_interval_s` the pause the
    server makes before each piece (for benchmarks), and `hold_after_chunks` makes it stop after
    that many pieces until released, noting a client that hangs up meanwhile.
    """

    status: int = 200
    content: str | None = ""
    body: Any = None
    vectors: tuple[tuple[float, ...], ...] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    hold: bool = False
    disconnect: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = "stop"
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    chunks: tuple[str, ...] | None = None
    chunk_interval_s: float = 0.0
    hold_after_chunks: int | None = None

    @classmethod
    def json(
        cls, value: Any, *, prompt_tokens: int | None = None, completion_tokens: int | None = None
    ) -> Reply:
        """A chat reply whose content is `value` serialised as JSON (token counts optional)."""
        content = json.dumps(value, ensure_ascii=False)
        return cls(
            content=content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )

    @classmethod
    def text(
        cls, content: str, *, prompt_tokens: int | None = None, completion_tokens: int | None = None
    ) -> Reply:
        """A chat reply with raw text content (prose, fenced JSON, malformed JSON …)."""
        return cls(
            content=content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )

    @classmethod
    def truncated(cls, content: str) -> Reply:
        """A chat reply cut off by the length limit (`finish_reason: "length"`)."""
        return cls(content=content, finish_reason="length")

    @classmethod
    def empty(cls, *, null: bool = False) -> Reply:
        """A chat reply with empty content (`""`, or `null` when `null=True`)."""
        return cls(content=None if null else "")

    @classmethod
    def error(cls, status: int, message: str = "scripted error", **headers: str) -> Reply:
        """An HTTP error in OpenAI's error shape; header names use `_` for `-`."""
        body = {"error": {"message": message, "type": "scripted_error", "code": status}}
        named = {name.replace("_", "-"): value for name, value in headers.items()}
        return cls(status=status, body=body, headers=named)

    @classmethod
    def anthropic_error(
        cls, status: int, message: str = "scripted error", kind: str = "invalid_request_error"
    ) -> Reply:
        """An HTTP error in Anthropic's error shape."""
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return cls(status=status, body=body)

    @classmethod
    def rate_limited(cls, retry_after_s: float | str) -> Reply:
        """429 Too Many Requests with a Retry-After header (seconds, or an HTTP date string)."""
        value = retry_after_s if isinstance(retry_after_s, str) else f"{retry_after_s:g}"
        return cls.error(429, "rate limited", retry_after=value)

    @classmethod
    def unsupported_response_format(cls) -> Reply:
        """400, as servers answer a `response_format` they do not take."""
        return cls.error(400, "response_format is not supported by this server")

    @classmethod
    def dropped(cls) -> Reply:
        """No answer: the server closes the connection (a crashed or restarting server)."""
        return cls(disconnect=True)

    @classmethod
    def raw(cls, body: Any, status: int = 200) -> Reply:
        """A whole response body, sent as-is (str) or as JSON: for malformed replies."""
        return cls(status=status, body=body)

    @classmethod
    def embeddings(cls, vectors: Sequence[Sequence[float]]) -> Reply:
        """An embeddings reply with exactly these vectors, in order."""
        return cls(vectors=tuple(tuple(float(x) for x in row) for row in vectors))

    @classmethod
    def calling(
        cls, *calls: tuple[str, str, Mapping[str, Any]], content: str | None = None
    ) -> Reply:
        """The assistant calls tools: each call `(id, name, arguments)`; `finish_reason` is
        `"tool_calls"`."""
        encoded = tuple((i, name, json.dumps(args, ensure_ascii=False)) for i, name, args in calls)
        return cls(content=content, tool_calls=encoded, finish_reason="tool_calls")

    @classmethod
    def streamed(
        cls,
        *chunks: str,
        interval_s: float = 0.0,
        hold_after: int | None = None,
    ) -> Reply:
        """A reply whose content is `chunks` joined, streamed one chunk per event when the
        request asks for a stream (`interval_s` before each; `hold_after` chunks, then held)."""
        return cls(
            content="".join(chunks), chunks=chunks, chunk_interval_s=interval_s,
            hold_after_chunks=hold_after,
        )  # fmt: skip

    def pieces(self) -> tuple[str, ...]:
        """The content as streamed: `chunks`, else one piece per word (its spaces kept)."""
        if self.chunks is not None:
            return self.chunks
        return tuple(re.findall(r"\s*\S+\s*", self.content or "")) or (
            (self.content,) if self.content else ()
        )

    @classmethod
    def held(cls, then: Reply | None = None) -> Reply:
        """Wait until released (or the server stops), then answer `then` (an empty reply)."""
        return replace(then or cls.text("released"), hold=True)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    stage: str

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return list(messages) if isinstance(messages, list) else []

    @property
    def streamed(self) -> bool:
        """Whether the request asks for server-sent events (`"stream": true`)."""
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def form(self) -> str | None:
        """The structured-output form the request asks for (`testing.endpoints.form_of`)."""
        return form_of(self.body)

    @property
    def system_prompt(self) -> str:
        return "\n".join(
            str(m.get("content") or "") for m in self.messages if m.get("role") == "system"
        )

    @property
    def prompt_chars(self) -> int:
        """Characters of message contents (chat) or inputs (embeddings)."""
        if self.path.endswith("/embeddings") and isinstance(self.body, dict):
            inputs = self.body.get("input")
            items = [inputs] if isinstance(inputs, str) else list(inputs or [])
            return sum(len(str(item)) for item in items)
        return sum(len(str(m.get("content") or "")) for m in self.messages)


def stage_of(path: str, headers: Mapping[str, str], body: Any) -> str:
    """The stage a request belongs to: header, then system-prompt marker, then a default."""
    named = headers.get(STAGE_HEADER)
    if named:
        return named
    if path.endswith("/embeddings"):
        return EMBEDDINGS_STAGE
    probe = RecordedRequest("POST", path, headers, body, DEFAULT_STAGE)
    found = STAGE_MARKER.search(probe.system_prompt)
    return found.group(1) if found else DEFAULT_STAGE


def form_of(body: Any) -> str | None:
    """The structured-output form a request body asks for, or None."""
    if not isinstance(body, Mapping):
        return None
    wanted = body.get("response_format")
    if isinstance(wanted, Mapping):
        kind = wanted.get("type")
        if kind == "json_schema":
            return "openai"
        if kind == "json_object":
            return "llamacpp" if "schema" in wanted else "json_object"
    return "ollama" if "format" in body else None


@dataclass(slots=True)
class StageUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
