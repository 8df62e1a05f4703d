"""After the upstream answered: the exchange captured, tool calls offloaded.

A client sends the whole conversation at every call, so the whole conversation is captured at
every call: capture's ids (role, speaker, text and the occurrence of that text in the
conversation) are the same each time, so each message is stored once however often it comes,
a message the previous call missed (a failure, a client that went away) is stored by the next,
and an answer is stored once when it comes back as history. Only the user's and the assistant's
words are captured; system prompts are the agent's, tool results go to context offload (each
pair idempotent by its call id), and the user's last message is offload's task boundary.
"""

from __future__ import annotations

import hashlib
from typing import Any

from stratamem.capture import CaptureResult, strip_injected
from stratamem.errors import InvalidInput
from stratamem.inputs import check_json, check_text
from stratamem.proxy.chat import ChatMessage, last_user_index, spoken, text_of, tool_pairs
from stratamem.proxy.deps import ProxyDeps, guarded, log


async def record(
    deps: ProxyDeps, tenant: str, session: str, messages: list[ChatMessage], answer: str | None
) -> None:
    """Capture the conversation with its `answer`, then hand offload its tool pairs and its
    last user message; each step is guarded (a failure is logged and counted, never raised)."""
    turns = spoken(messages)
    if answer and strip_injected(answer):
        turns.append({"role": "assistant", "content": answer.strip()})
    turns = _capturable(deps, turns)
    if turns:
        result = await guarded(deps, "capture", _capture(deps, tenant, session, turns))
        if result is not None:
            deps.count("proxy_captured_messages", len(result.stored))
    if deps.offload is not None:
        await _offload(deps, tenant, session, messages)


async def _capture(
    deps: ProxyDeps, tenant: str, session: str, turns: list[dict[str, Any]]
) -> CaptureResult:
    await deps.admit_capture(tenant)  # refused while too many of the tenant's records wait
    return await deps.memory.capture(tenant, session, turns)


def _capturable(deps: ProxyDeps, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns capture accepts: a message over `max_turn_chars`, or whose text is not Unicode,
    is left out (and counted), not the whole capture refused at every later call."""
    limit = deps.memory.settings.max_turn_chars
    kept = [t for t in turns if len(t["content"]) <= limit and _unicode(t["content"])]
    if len(kept) < len(turns):
        left = len(turns) - len(kept)
        log.warning("proxy: %d message(s) not captured: over max_turn_chars (%d) or not"
                    " Unicode text", left, limit)  # fmt: skip
        deps.count("proxy_uncaptured_messages", left)
    return kept


def _unicode(text: str) -> bool:
    try:
        check_text(text, "a message")
    except InvalidInput:
        return False
    return True


async def _offload(deps: ProxyDeps, tenant: str, session: str, messages: list[ChatMessage]) -> None:
    offload = deps.offload
    assert offload is not None  # checked by the caller
    at = last_user_index(messages)
    if at is not None:
        text = strip_injected(text_of(messages[at].get("content")))
        marked = offload.user_message(tenant, session, text, message_id=mark_id(messages, at, text))
        await guarded(deps, "offload", marked)
    pairs = [pair for pair in tool_pairs(messages) if _valid(pair)]
    if pairs:
        await guarded(deps, "offload", offload.ingest(tenant, session, pairs))


def _valid(pair: dict[str, Any]) -> bool:
    """A pair ingest takes (one it refuses would fail the others with it, at every call)."""
    try:
        check_json(pair, "a tool pair")
    except InvalidInput:
        return False
    return True


def mark_id(messages: list[ChatMessage], at: int, text: str) -> str:
    """The task boundary's id of the user message at `at`: the same at every call of the
    conversation (its text and how many user messages came before it)."""
    before = sum(1 for m in messages[:at] if m.get("role") == "user")
    digest = hashlib.blake2b(f"{before}\x1f{text}".encode(), digest_size=12).hexdigest()
    return f"u-{digest}"
