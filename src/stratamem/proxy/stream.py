"""Following a streamed chat completion (server-sent events) without holding it back.

`SSESplitter` cuts the upstream's bytes into whole events, each forwarded as soon as its blank
line arrives. `ChatStream` reads each event's JSON as it passes: the answer's text, its tool
calls and why it finished, and whether the stream ended properly (`[DONE]`, or a finish reason
before the connection closed) — a stream cut short is never captured. `OwnCalls` withholds the
deltas of the proxy's own tool (`read_tool_result`) from the client and renumbers the client's
calls around them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stratamem.proxy.chat import arguments_of
from stratamem.proxy.tools import OwnCall

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
DONE_DATA = "[DONE]"


class SSESplitter:
    """Bytes in, whole events out (each with its terminating blank line)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        while True:
            end = _EVENT_END.search(self._buffer)
            if end is None:
                return
            event, self._buffer = self._buffer[: end.end()], self._buffer[end.end() :]
            yield event


def data_of(event: bytes) -> str | None:
    """The event's data (its `data:` lines joined), or None for a comment or keep-alive."""
    lines = event.decode("utf-8", "replace").splitlines()
    data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
    return "\n".join(data) if data else None


def payload_of(event: bytes) -> dict[str, Any] | None:
    """The event's data as a JSON object (None for `[DONE]`, a comment or anything else)."""
    data = data_of(event)
    if data is None or data.strip() == DONE_DATA:
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def encode_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


@dataclass(slots=True)
class StreamedCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class FollowedStream:
    """What every followed stream knows: the answer's text, its last event (held back by the
    proxy until the exchange is captured), and whether an error event came."""

    text: list[str] = field(default_factory=list)
    done_event: bytes | None = None
    failed: bool = False

    @property
    def done(self) -> bool:
        return self.done_event is not None

    @property
    def finished(self) -> bool:
        """The model said why it stopped (each API says it its own way)."""
        raise NotImplementedError

    @property
    def complete(self) -> bool:
        """Ended as a stream should: its last event, or a stop reason, and no error event."""
        return (self.done or self.finished) and not self.failed

    @property
    def answer(self) -> str:
        return "".join(self.text)


@dataclass(slots=True)
class ChatStream(FollowedStream):
    """What one streamed completion said (its first choice), read event by event; its last
    event is `[DONE]`."""

    calls: dict[int, StreamedCall] = field(default_factory=dict)
    finish_reason: str | None = None

    def observe(self, event: bytes) -> None:
        if (data_of(event) or "").strip() == DONE_DATA:
            self.done_event = event
            return
        payload = payload_of(event)
        if payload is None:
            return
        if "error" in payload:
            self.failed = True
        for choice in _first_choices(payload):
            self._observe_choice(choice)

    def _observe_choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                self.text.append(content)
            for call in delta.get("tool_calls") or ():
                self._observe_call(call)
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]

    def _observe_call(self, call: object) -> None:
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            return
        found = self.calls.setdefault(call["index"], StreamedCall())
        found.id = str(call.get("id") or found.id)
        function = call.get("function")
        if isinstance(function, dict):
            found.name = str(function.get("name") or found.name)
            if isinstance(function.get("arguments"), str):
                found.arguments += function["arguments"]

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


def _first_choices(payload: dict[str, Any]) -> list[dict[str, Any]]:
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return []
    return [c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0]


class OwnCalls:
    """Keeps the deltas of the proxy's own tool calls from the client: a call is the proxy's
    when its first delta names `tool`; the client's keep their order, renumbered from 0."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.own: set[int] = set()
        self.theirs: dict[int, int] = {}

    def next_round(self) -> None:
        """A new upstream stream: its calls are counted from 0 again."""
        self.own, self.theirs = set(), {}

    def calls(self, stream: ChatStream) -> list[OwnCall]:
        """The proxy's calls the stream made, in order."""
        return [OwnCall(c.id, arguments_of(c.arguments))
                for i, c in sorted(stream.calls.items()) if i in self.own]  # fmt: skip

    def rewrite(self, event: bytes) -> bytes | None:
        """The event to forward (rewritten when it held an own call), or None to withhold."""
        payload = payload_of(event)
        if payload is None or not self._touches_calls(payload):
            return event
        for choice in _first_choices(payload):
            delta = choice.get("delta")
            if isinstance(delta, dict) and delta.get("tool_calls"):
                kept = [self._renumbered(c) for c in delta["tool_calls"] if not self._is_own(c)]
                delta["tool_calls"] = kept
                if not kept:
                    del delta["tool_calls"]
        if _empty(payload):
            return None
        return encode_event(payload)

    def only_own(self, stream: ChatStream) -> bool:
        """Whether every call the stream made is the proxy's (and there was one)."""
        return bool(stream.calls) and set(stream.calls) <= self.own

    def _touches_calls(self, payload: dict[str, Any]) -> bool:
        return any(isinstance(c.get("delta"), dict) and c["delta"].get("tool_calls")
                   for c in _first_choices(payload))  # fmt: skip

    def _is_own(self, call: object) -> bool:
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            return False
        index = call["index"]
        function = call.get("function")
        if isinstance(function, dict) and function.get("name") == self.tool:
            self.own.add(index)
        return index in self.own

    def _renumbered(self, call: Any) -> Any:
        if isinstance(call, dict) and isinstance(call.get("index"), int):
            index = self.theirs.setdefault(call["index"], len(self.theirs))
            return {**call, "index": index}
        return call


def _empty(payload: dict[str, Any]) -> bool:
    """A chunk left with nothing to say once own calls were taken out."""
    for choice in _first_choices(payload):
        delta = choice.get("delta") or {}
        if delta or choice.get("finish_reason") is not None:
            return False
    return "usage" not in payload or payload.get("usage") is None
