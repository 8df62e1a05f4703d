"""The scripted server's replies as OpenAI chat-completion chunks (server-sent events).

One `chat.completion.chunk` opens with the assistant's role, one follows per content piece
(`Reply.pieces`), each tool call comes as a delta with its id and name, then its arguments in
two pieces; the last chunk carries `finish_reason`, a usage chunk (empty `choices`) follows when
the request asked for it (`stream_options.include_usage`), then `data: [DONE]`. This is the
format OpenAI documents for `stream: true`, and the one the `openai` package parses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from stratamem.testing.replies import RecordedRequest, Reply

DONE = b"data: [DONE]\n\n"


def event(payload: Any) -> bytes:
    """One server-sent event carrying `payload` as JSON."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


class ChunkMaker:
    """The chunks of one streamed reply, all with the same id, model and creation time."""

    def __init__(self, request: RecordedRequest, completion_id: str) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        self.id = completion_id
        self.model = str(body.get("model", "scripted-chat"))
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return event(self._shell([choice]))

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip
        return event({**self._shell([]), "usage": usage})

    def _shell(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": 0,
                "model": self.model, "choices": choices}  # fmt: skip


def tool_call_chunks(maker: ChunkMaker, reply: Reply) -> Iterator[bytes]:
    """Each tool call's id and name, then its arguments in two halves."""
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        head = {"index": index, "id": call_id, "type": "function",
                "function": {"name": name, "arguments": ""}}  # fmt: skip
        yield maker.chunk({"tool_calls": [head]})
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            yield maker.chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
