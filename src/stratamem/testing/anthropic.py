"""The scripted server's replies in Anthropic's messages format, whole and streamed.

A reply's content becomes a `text` block, its tool calls `tool_use` blocks, and its finish
reason the `stop_reason` (`stop` → `end_turn`, `length` → `max_tokens`, `tool_calls` →
`tool_use`). A stream is `message_start`, a `ping`, each block's start, deltas (one
`text_delta` per piece, a call's input in two `input_json_delta` halves) and stop, then
`message_delta` with the stop reason and `message_stop`: the events Anthropic documents, and the
ones the `anthropic` package parses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from stratamem.testing.replies import RecordedRequest, Reply

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def named_event(kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, **payload}, ensure_ascii=False).encode()
    return f"event: {kind}\n".encode() + b"data: " + data + b"\n\n"


def _stop_reason(reply: Reply) -> str | None:
    return STOP_REASONS.get(reply.finish_reason or "", reply.finish_reason)


def _model(request: RecordedRequest) -> str:
    body = request.body if isinstance(request.body, dict) else {}
    return str(body.get("model", "scripted-chat"))


def message(
    request: RecordedRequest, reply: Reply, message_id: str, usage: tuple[int, int]
) -> dict[str, Any]:
    """The whole message."""
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    content += [{"type": "tool_use", "id": i, "name": name, "input": json.loads(args)}
                for i, name, args in reply.tool_calls]  # fmt: skip
    return {"id": message_id, "type": "message", "role": "assistant", "model": _model(request),
            "content": content, "stop_reason": _stop_reason(reply), "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}  # fmt: skip


def opening(request: RecordedRequest, message_id: str, input_tokens: int) -> Iterator[bytes]:
    usage = {"input_tokens": input_tokens, "output_tokens": 1}
    shell: dict[str, Any] = {
        "id": message_id, "type": "message", "role": "assistant", "model": _model(request),
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage,
    }  # fmt: skip
    yield named_event("message_start", {"message": shell})
    yield named_event("ping", {})


def text_start() -> bytes:
    return named_event("content_block_start",
                       {"index": 0, "content_block": {"type": "text", "text": ""}})  # fmt: skip


def text_delta(piece: str) -> bytes:
    return named_event("content_block_delta",
                       {"index": 0, "delta": {"type": "text_delta", "text": piece}})  # fmt: skip


def closing(reply: Reply, first_index: int, output_tokens: int) -> Iterator[bytes]:
    """The text block's stop (when there was one), the tool uses, and the message's end."""
    if first_index:
        yield named_event("content_block_stop", {"index": 0})
    for index, (call_id, name, args) in enumerate(reply.tool_calls, start=first_index):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        yield named_event("content_block_start", {"index": index, "content_block": block})
        half = len(args) // 2
        for part in (args[:half], args[half:]):
            delta = {"type": "input_json_delta", "partial_json": part}
            yield named_event("content_block_delta", {"index": index, "delta": delta})
        yield named_event("content_block_stop", {"index": index})
    yield named_event("message_delta", {"delta": {"stop_reason": _stop_reason(reply),
                                                  "stop_sequence": None},
                                        "usage": {"output_tokens": output_tokens}})  # fmt: skip
    yield named_event("message_stop", {})


def error_body(message_text: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message_text}}
