"""Reading OpenAI chat messages: their text, the user's last message, what to capture and which
tool calls to offload. The messages come from a client and are untrusted: anything of another
shape is left out here (and forwarded as it is; the upstream judges the request)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.capture import strip_injected
from stratamem.domain import check_ident
from stratamem.errors import InvalidIdentifier

ChatMessage = dict[str, Any]
#: Roles whose words are conversation (captured); system and developer prompts are not.
SPOKEN = ("user", "assistant")


def text_of(content: object) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        part.get("text") for part in content
        if isinstance(part, Mapping) and part.get("type") in ("text", "input_text")
    ]  # fmt: skip
    return "\n".join(p for p in parts if isinstance(p, str))


def messages_of(body: Mapping[str, Any]) -> list[ChatMessage]:
    """The request's messages that are objects (an odd one is the upstream's to refuse)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, dict)]


def last_user_index(messages: Sequence[ChatMessage]) -> int | None:
    """Index of the last user message with words of its own (not only recalled blocks)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and strip_injected(text_of(message.get("content"))):
            return index
    return None


def spoken(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The user's and the assistant's words, in order, as capture takes them (with `name` as
    the speaker); messages without words (an assistant's bare tool calls) are left out."""
    found = []
    for message in messages:
        role = message.get("role")
        text = text_of(message.get("content")).strip()
        if role not in SPOKEN or not strip_injected(text):
            continue
        turn: dict[str, Any] = {"role": role, "content": text}
        if isinstance(message.get("name"), str) and message["name"].strip():
            turn["name"] = message["name"]
        found.append(turn)
    return found


def tool_pairs(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Each tool result with the call it answers, as offload's tool pairs; a result whose
    call id is not a valid identifier, or whose call is not in the conversation, is left out."""
    calls = {call_id: call for call_id, call in _calls(messages)}
    pairs = []
    for message in messages:
        call_id = message.get("tool_call_id")
        if message.get("role") != "tool" or not isinstance(call_id, str) or call_id not in calls:
            continue
        name, params = calls[call_id]
        pairs.append({"call_id": call_id, "tool": name, "params": params,
                      "result": text_of(message.get("content"))})  # fmt: skip
    return pairs


def _calls(messages: Sequence[ChatMessage]) -> list[tuple[str, tuple[str, dict[str, Any]]]]:
    found = []
    for message in messages:
        if message.get("role") != "assistant" or not isinstance(message.get("tool_calls"), list):
            continue
        for call in message["tool_calls"]:
            function = call.get("function") if isinstance(call, Mapping) else None
            call_id = call.get("id") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not _is_ident(call_id):
                continue
            name = str(function.get("name") or "tool")
            found.append((str(call_id), (name, arguments_of(function.get("arguments")))))
    return found


def arguments_of(raw: object) -> dict[str, Any]:
    """A call's arguments (JSON text, as OpenAI sends them) as an object."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"arguments": raw}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {}


def _is_ident(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        check_ident(value, "call id")
    except InvalidIdentifier:
        return False
    return True


def conversation_session(messages: Sequence[ChatMessage]) -> str | None:
    """The default session of a conversation: `conv-` and a digest of its first user message,
    the same at every call of the conversation (None when it has no user message yet)."""
    for message in messages:
        if message.get("role") == "user":
            text = strip_injected(text_of(message.get("content")))
            if text:
                digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()
                return f"conv-{digest}"
    return None
