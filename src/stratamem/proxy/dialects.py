"""The APIs the proxy speaks, behind one `Dialect`: what differs between OpenAI's chat
completions and Anthropic's messages is how a request holds its conversation, where the blocks
go, how the proxy's tool is declared and called, and the shape of answers, streams and errors.
Everything else (recall, compaction, capture, offload, the rounds of the proxy's tool) works on
the *view*: the conversation as OpenAI chat messages, which `chat` reads."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stratamem.proxy.answers import WholeAnswer, openai_error
from stratamem.proxy.chat import ChatMessage, arguments_of, last_user_index, messages_of
from stratamem.proxy.stream import ChatStream, OwnCalls
from stratamem.proxy.tools import DESCRIPTION, PARAMETERS, READ_TOOL, OwnCall
from stratamem.proxy.upstream import Upstream

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Reply:
    """What a whole answer said: its text, the proxy's calls, and how many calls were others'."""

    text: str | None
    own: list[OwnCall] = field(default_factory=list)
    others: int = 0


class StreamState(Protocol):
    """One upstream stream followed event by event (`stream.FollowedStream`)."""

    @property
    def answer(self) -> str: ...
    @property
    def text(self) -> list[str]: ...
    @property
    def finished(self) -> bool: ...
    @property
    def complete(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    @property
    def done_event(self) -> bytes | None: ...
    def observe(self, event: bytes) -> None: ...


class OwnFilter(Protocol):
    """Keeps the proxy's tool calls out of the events the client gets."""

    def rewrite(self, event: bytes) -> bytes | None: ...
    def only_own(self, stream: Any) -> bool: ...
    def calls(self, stream: Any) -> list[OwnCall]: ...
    def next_round(self) -> None: ...


class Dialect(Protocol):
    upstream: Upstream
    path: str

    def view(self, body: Mapping[str, Any]) -> list[ChatMessage]: ...
    def rewrite(self, body: Mapping[str, Any], compacted: list[ChatMessage] | None, stable: str,
                context: str) -> dict[str, Any]: ...  # fmt: skip
    def allows_tools(self, body: Mapping[str, Any]) -> bool: ...
    def with_tool(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def without_tool(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def reply(self, parsed: object) -> Reply | None: ...
    def without_own(self, parsed: Any) -> Any: ...
    def continued(self, body: Mapping[str, Any], text: str | None, own: Sequence[OwnCall],
                  results: Sequence[str]) -> dict[str, Any]: ...  # fmt: skip
    def stream(self) -> StreamState: ...
    def own_filter(self) -> OwnFilter: ...
    def error(self, status: int, kind: str, message: str) -> WholeAnswer: ...
    def error_event(self, answer: WholeAnswer) -> bytes: ...


def tool_names(tools: object, name_of: Any) -> list[str]:
    if not isinstance(tools, list):
        return []
    return [n for n in (name_of(t) for t in tools if isinstance(t, Mapping)) if isinstance(n, str)]


class OpenAIChat:
    """OpenAI's chat completions (`POST …/chat/completions`): the view is the request's own
    messages; the stable block joins the leading system message, the per-turn block goes before
    the words of the last user message."""

    path = "/chat/completions"

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def view(self, body: Mapping[str, Any]) -> list[ChatMessage]:
        messages = messages_of(body)
        return messages if len(messages) == len(body.get("messages") or ()) else []

    def rewrite(self, body: Mapping[str, Any], compacted: list[ChatMessage] | None, stable: str,
                context: str) -> dict[str, Any]:  # fmt: skip
        messages = compacted if compacted is not None else self.view(body)
        return {**body, "messages": with_blocks(messages, stable, context)}

    def allows_tools(self, body: Mapping[str, Any]) -> bool:
        names = tool_names(body.get("tools"), _function_name)
        return body.get("tool_choice") != "none" and bool(names) and READ_TOOL not in names

    def with_tool(self, body: Mapping[str, Any]) -> dict[str, Any]:
        declared = {"type": "function", "function": {
            "name": READ_TOOL, "description": DESCRIPTION, "parameters": PARAMETERS}}  # fmt: skip
        return {**body, "tools": [*body["tools"], declared]}

    def without_tool(self, body: Mapping[str, Any]) -> dict[str, Any]:
        tools = [t for t in body.get("tools") or [] if _function_name(t) != READ_TOOL]
        return {**body, "tools": tools}

    def reply(self, parsed: object) -> Reply | None:
        message = _first_message(parsed)
        if message is None:
            return None
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
        own = [OwnCall(str(c.get("id") or ""), arguments_of(c["function"].get("arguments")))
               for c in calls if _function_name(c) == READ_TOOL]  # fmt: skip
        content = message.get("content")
        return Reply(content if isinstance(content, str) else None, own, len(calls) - len(own))

    def without_own(self, parsed: Any) -> Any:
        choice = parsed["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        kept = [c for c in calls if _function_name(c) != READ_TOOL]
        choice["message"]["tool_calls"] = kept
        if not kept:
            del choice["message"]["tool_calls"]
            choice["finish_reason"] = "stop"
        return parsed

    def continued(self, body: Mapping[str, Any], text: str | None, own: Sequence[OwnCall],
                  results: Sequence[str]) -> dict[str, Any]:  # fmt: skip
        calls = [{"id": c.id, "type": "function", "function": {"name": READ_TOOL,
                  "arguments": json.dumps(dict(c.arguments))}} for c in own]  # fmt: skip
        asked = {"role": "assistant", "content": text, "tool_calls": calls}
        answered = [{"role": "tool", "tool_call_id": c.id, "content": r}
                    for c, r in zip(own, results, strict=True)]  # fmt: skip
        return {**body, "messages": [*body["messages"], asked, *answered]}

    def stream(self) -> ChatStream:
        return ChatStream()

    def own_filter(self) -> OwnCalls:
        return OwnCalls(READ_TOOL)

    def error(self, status: int, kind: str, message: str) -> WholeAnswer:
        return openai_error(status, kind, message)

    def error_event(self, answer: WholeAnswer) -> bytes:
        return b"data: " + answer.body + b"\n\n"


def _function_name(item: object) -> object:
    function = item.get("function") if isinstance(item, Mapping) else None
    return function.get("name") if isinstance(function, Mapping) else None


def _first_message(parsed: object) -> dict[str, Any] | None:
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def with_blocks(messages: Sequence[ChatMessage], stable: str, context: str) -> list[ChatMessage]:
    """`messages` with the stable block in the leading system message and the per-turn block
    before the words of the last user message."""
    sent = list(messages)
    if context:
        at = last_user_index(sent)
        if at is not None:
            sent[at] = {**sent[at], "content": before(context, sent[at].get("content"))}
    if stable:
        if sent and sent[0].get("role") in SYSTEM_ROLES:
            sent[0] = {**sent[0], "content": after(sent[0].get("content"), stable)}
        else:
            sent.insert(0, {"role": "system", "content": stable})
    return sent


def before(block: str, content: object) -> object:
    """`block` as a text part before the content's (or before its text)."""
    if isinstance(content, list):
        return [{"type": "text", "text": block}, *content]
    return f"{block}\n\n{content if isinstance(content, str) else ''}"


def after(content: object, block: str) -> object:
    """`block` after the content (a text part after the parts, or after a blank line)."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": block}]
    if isinstance(content, str) and content:
        return f"{content}\n\n{block}"
    return block
