"""Anthropic's messages API (`POST …/v1/messages`) as a `Dialect`.

The view: each assistant message becomes one chat message (its text, its `tool_use` blocks as
tool calls); each user message becomes a tool message per `tool_result` block and one user
message for its other blocks. Every view message remembers where it came from (`SRC`, `BLOCK`),
so a compaction of the view is applied back block by block: a result replaced by its summary, a
message dropped, a `tool_result` whose `tool_use` was dropped taken out with it, and the note
of what was dropped sent as a user message first (the API joins consecutive user turns). The
stable block joins `system` (after the client's blocks, so their cache breakpoints hold); the
per-turn block goes before the words of the last user message (after its `tool_result`
blocks, which must come first).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratamem.capture import strip_injected
from stratamem.proxy.answers import WholeAnswer
from stratamem.proxy.chat import ChatMessage, arguments_of, text_of
from stratamem.proxy.dialects import Reply, after, tool_names
from stratamem.proxy.stream import FollowedStream, payload_of
from stratamem.proxy.tools import DESCRIPTION, PARAMETERS, READ_TOOL, OwnCall
from stratamem.proxy.upstream import Upstream

SRC, BLOCK = "_stratamem_message", "_stratamem_block"
VERSION = "2023-06-01"
#: The client's headers the upstream needs: the API version and the betas it asked for.
FORWARDED = ("anthropic-version", "anthropic-beta")
Block = dict[str, Any]


def anthropic_error(status: int, kind: str, message: str) -> WholeAnswer:
    """An error in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`)."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return WholeAnswer(status, json.dumps(body).encode())


def forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers for the upstream, with the API version it needs."""
    found = {name: headers[name] for name in FORWARDED if name in headers}
    return {"anthropic-version": VERSION, **found}


def blocks_of(content: object) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def result_text(content: object) -> str:
    return content if isinstance(content, str) else text_of(blocks_of(content))


class AnthropicMessages:
    path = "/messages"

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    # -- the view ---------------------------------------------------------------------------
    def view(self, body: Mapping[str, Any]) -> list[ChatMessage]:
        natives = body.get("messages")
        if not isinstance(natives, list) or not all(isinstance(m, dict) for m in natives):
            return []
        views: list[ChatMessage] = []
        for at, message in enumerate(natives):
            blocks = blocks_of(message.get("content"))
            if message.get("role") == "assistant":
                views.append(_assistant_view(at, blocks))
            elif message.get("role") == "user":
                views.extend(_user_views(at, blocks))
        return views

    def rewrite(self, body: Mapping[str, Any], compacted: list[ChatMessage] | None, stable: str,
                context: str) -> dict[str, Any]:  # fmt: skip
        messages = list(body["messages"])
        if compacted is not None:
            messages = rebuilt(messages, compacted)
        sent = {**body, "messages": with_context(messages, context) if context else messages}
        if stable:
            sent["system"] = after(body.get("system"), stable)
        return sent

    # -- the proxy's tool -----------------------------------------------------------------------
    def allows_tools(self, body: Mapping[str, Any]) -> bool:
        names = tool_names(body.get("tools"), lambda t: t.get("name"))
        choice = body.get("tool_choice")
        none = isinstance(choice, Mapping) and choice.get("type") == "none"
        return not none and bool(names) and READ_TOOL not in names

    def with_tool(self, body: Mapping[str, Any]) -> dict[str, Any]:
        declared = {"name": READ_TOOL, "description": DESCRIPTION, "input_schema": PARAMETERS}
        return {**body, "tools": [*body["tools"], declared]}

    def without_tool(self, body: Mapping[str, Any]) -> dict[str, Any]:
        tools = [t for t in body.get("tools") or [] if t.get("name") != READ_TOOL]
        return {**body, "tools": tools}

    def reply(self, parsed: object) -> Reply | None:
        if not isinstance(parsed, dict) or not isinstance(parsed.get("content"), list):
            return None
        blocks = blocks_of(parsed["content"])
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        own = [OwnCall(str(b.get("id") or ""), arguments_of(b.get("input")))
               for b in uses if b.get("name") == READ_TOOL]  # fmt: skip
        return Reply(text_of(blocks) or None, own, len(uses) - len(own))

    def without_own(self, parsed: Any) -> Any:
        kept = [b for b in parsed["content"] if not _own_use(b)]
        parsed["content"] = kept
        if parsed.get("stop_reason") == "tool_use" and not any(_use(b) for b in kept):
            parsed["stop_reason"] = "end_turn"
        return parsed

    def continued(self, body: Mapping[str, Any], text: str | None, own: Sequence[OwnCall],
                  results: Sequence[str]) -> dict[str, Any]:  # fmt: skip
        said: list[Block] = [{"type": "text", "text": text}] if text else []
        said += [{"type": "tool_use", "id": c.id, "name": READ_TOOL, "input": dict(c.arguments)}
                 for c in own]  # fmt: skip
        answered = [{"type": "tool_result", "tool_use_id": c.id, "content": r}
                    for c, r in zip(own, results, strict=True)]  # fmt: skip
        asked = [{"role": "assistant", "content": said}, {"role": "user", "content": answered}]
        return {**body, "messages": [*body["messages"], *asked]}

    # -- streams and errors ---------------------------------------------------------------------
    def stream(self) -> MessagesStream:
        return MessagesStream()

    def own_filter(self) -> OwnBlocks:
        return OwnBlocks()

    def error(self, status: int, kind: str, message: str) -> WholeAnswer:
        return anthropic_error(status, kind, message)

    def error_event(self, answer: WholeAnswer) -> bytes:
        return b"event: error\ndata: " + answer.body + b"\n\n"


def _use(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _own_use(block: object) -> bool:
    return _use(block) and isinstance(block, dict) and block.get("name") == READ_TOOL


def _assistant_view(at: int, blocks: list[Block]) -> ChatMessage:
    calls = [{"id": b.get("id"), "type": "function", "function": {
        "name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
        for b in blocks if _use(b)]  # fmt: skip
    view: ChatMessage = {"role": "assistant", "content": text_of(blocks) or None, SRC: at}
    if calls:
        view["tool_calls"] = calls
    return view


def _user_views(at: int, blocks: list[Block]) -> list[ChatMessage]:
    views: list[ChatMessage] = [
        {"role": "tool", "tool_call_id": b.get("tool_use_id"),
         "content": result_text(b.get("content")), SRC: at, BLOCK: j}
        for j, b in enumerate(blocks) if b.get("type") == "tool_result"
    ]  # fmt: skip
    others = [b for b in blocks if b.get("type") != "tool_result"]
    if others:
        views.append({"role": "user", "content": text_of(others), SRC: at})
    return views


def rebuilt(natives: list[dict[str, Any]], compacted: list[ChatMessage]) -> list[dict[str, Any]]:
    """The request's messages as the compacted view left them."""
    kept = {v[SRC] for v in compacted if SRC in v and v.get("role") != "tool"}
    results = {(v[SRC], v[BLOCK]): v.get("content") for v in compacted
               if v.get("role") == "tool" and SRC in v}  # fmt: skip
    notes = [v["content"] for v in compacted if SRC not in v and isinstance(v.get("content"), str)]
    messages: list[dict[str, Any]] = []
    for at, message in enumerate(natives):
        if message.get("role") != "user":
            if at in kept:
                messages.append(message)
            continue
        blocks, changed = _kept_blocks(at, blocks_of(message.get("content")), kept, results)
        if blocks:
            messages.append({**message, "content": blocks} if changed else message)
    if notes:
        note = {"type": "text", "text": "\n\n".join(notes)}
        messages.insert(0, {"role": "user", "content": [note]})
    return messages


def _kept_blocks(
    at: int, blocks: list[Block], kept: set[int], results: Mapping[tuple[int, int], object]
) -> tuple[list[Block], bool]:
    """A user message's blocks that stay (a result with the compacted content), and whether
    anything changed."""
    new: list[Block] = []
    for j, block in enumerate(blocks):
        if block.get("type") != "tool_result":
            if at in kept:
                new.append(block)
        elif (at, j) in results:
            content = results[(at, j)]
            new.append(block if content == result_text(block.get("content"))
                       else {**block, "content": content})  # fmt: skip
    return new, new != blocks


def with_context(messages: list[dict[str, Any]], context: str) -> list[dict[str, Any]]:
    """The per-turn block before the words of the last user message that has words."""
    for at in range(len(messages) - 1, -1, -1):
        message = messages[at]
        blocks = blocks_of(message.get("content"))
        if message.get("role") != "user" or not strip_injected(
            text_of([b for b in blocks if b.get("type") != "tool_result"])
        ):
            continue
        first = next(j for j, b in enumerate(blocks) if b.get("type") != "tool_result")
        block = {"type": "text", "text": context}
        own = message["content"]
        content: object = (f"{context}\n\n{own}" if isinstance(own, str)
                           else [*blocks[:first], block, *blocks[first:]])  # fmt: skip
        return [*messages[:at], {**message, "content": content}, *messages[at + 1 :]]
    return messages


def encode_named(kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, ensure_ascii=False).encode()
    return f"event: {kind}\n".encode() + b"data: " + data + b"\n\n"


@dataclass(slots=True)
class _StreamedBlock:
    type: str = ""
    id: str = ""
    name: str = ""
    input: str = ""


@dataclass(slots=True)
class MessagesStream(FollowedStream):
    """What one streamed message said, read event by event; its last event is
    `message_stop`."""

    blocks: dict[int, _StreamedBlock] = field(default_factory=dict)
    stop_reason: str | None = None

    def observe(self, event: bytes) -> None:
        payload = payload_of(event) or {}
        kind = payload.get("type")
        if kind == "message_stop":
            self.done_event = event
        elif kind == "error":
            self.failed = True
        elif kind == "message_delta" and isinstance(payload.get("delta"), dict):
            reason = payload["delta"].get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else self.stop_reason
        elif kind in ("content_block_start", "content_block_delta"):
            self._observe_block(payload)

    def _observe_block(self, payload: dict[str, Any]) -> None:
        index = payload.get("index")
        if not isinstance(index, int):
            return
        started = payload.get("content_block")
        if isinstance(started, dict):
            self.blocks[index] = _StreamedBlock(str(started.get("type") or ""),
                                                str(started.get("id") or ""),
                                                str(started.get("name") or ""))  # fmt: skip
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            self.text.append(delta["text"])
        if delta.get("type") == "input_json_delta" and index in self.blocks:
            self.blocks[index].input += str(delta.get("partial_json") or "")

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None


_BLOCK_EVENTS = ("content_block_start", "content_block_delta", "content_block_stop")


class OwnBlocks:
    """Keeps the proxy's `tool_use` blocks from the client: their start, deltas and stop are
    withheld, the client's blocks renumbered around them, and, after a round of the proxy's
    calls, the next stream's `message_start` withheld and its blocks numbered on from the
    blocks the client already has."""

    def __init__(self) -> None:
        self.own: set[int] = set()
        self.index: dict[int, int] = {}
        self.offset = 0
        self.rounds = 0

    def rewrite(self, event: bytes) -> bytes | None:
        payload = payload_of(event) or {}
        kind = payload.get("type")
        if kind == "message_start":
            return None if self.rounds else event
        index = payload.get("index")
        if kind not in _BLOCK_EVENTS or not isinstance(index, int):
            return event
        if kind == "content_block_start":
            self._started(index, payload.get("content_block"))
        if index in self.own:
            return None
        renumbered = self.index.get(index, index)
        if renumbered == index:
            return event
        return encode_named(str(kind), {**payload, "index": renumbered})

    def _started(self, index: int, block: object) -> None:
        if _own_use(block):
            self.own.add(index)
        else:
            self.index[index] = self.offset + len(self.index)

    def only_own(self, stream: MessagesStream) -> bool:
        uses = {i for i, b in stream.blocks.items() if b.type == "tool_use"}
        return bool(uses) and uses <= self.own

    def calls(self, stream: MessagesStream) -> list[OwnCall]:
        return [OwnCall(b.id, arguments_of(b.input))
                for i, b in sorted(stream.blocks.items()) if i in self.own]  # fmt: skip

    def next_round(self) -> None:
        self.offset += len(self.index)
        self.own, self.index = set(), {}
        self.rounds += 1
