"""Before the upstream call: recall for the user's last message, compaction over budget, and
the request rewritten with both.

- The stable block (profile, scene index) is appended to the leading system message (or is one,
  when there is none): what comes before it, the client's system prompt, stays byte for byte a
  prefix the upstream's prompt cache can reuse, and the block itself changes only when the
  layers rewrite the profile.
- The per-turn block goes before the words of the user's last message, in that message only:
  every earlier message stays as the client sent it, so the cached prefix reaches up to it.
- Recalled turns the request already carries (this conversation's own turns) are left out of
  the block; both blocks are tagged (`<stratamem-recall>`, `<stratamem-profile>`) so capture
  strips them if they ever come back.
- Recall and compaction run side by side, each within `recall_timeout_s`; either may be skipped
  (`deps.guarded`), and the request then goes as it came, without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stratamem.capture import strip_injected
from stratamem.core import Recall
from stratamem.domain import Hit, Layer
from stratamem.offload import Compaction, Level
from stratamem.offload.compaction import level_for
from stratamem.offload.tokens import context_tokens
from stratamem.proxy import tools
from stratamem.proxy.chat import ChatMessage, last_user_index, messages_of, text_of
from stratamem.proxy.deps import ProxyDeps, guarded
from stratamem.retrieval.render import render_recall
from stratamem.retrieval.search import MAX_QUERY_CHARS

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Prepared:
    """The request as it goes upstream, and what was done to it."""

    body: dict[str, Any]
    recalled: bool = False
    compaction: Level = Level.NONE
    offered_tool: bool = False


async def prepare(
    deps: ProxyDeps, tenant: str, session: str, body: dict[str, Any], budget_tokens: int
) -> Prepared:
    messages = messages_of(body)
    if len(messages) != len(body.get("messages") or ()) or not messages:
        return Prepared(body)  # not a list of messages: the upstream's to refuse
    at = last_user_index(messages)
    query = None if at is None else strip_injected(text_of(messages[at].get("content")))
    recalled, compacted = await asyncio.gather(
        _recall(deps, tenant, session, query, messages),
        _compact(deps, tenant, session, messages, budget_tokens),
    )
    if compacted is not None:
        messages = compacted.messages
    if recalled is not None:
        messages = with_blocks(messages, recalled.stable, recalled.context)
    level = compacted.level if compacted is not None else Level.NONE
    sent = {**body, "messages": messages}
    offer = compacted is not None and _put_refs(compacted) and tools.allows_tools(body)
    if offer:
        sent = tools.with_tool(sent)
    return Prepared(sent, recalled is not None, level, offer)


async def _recall(
    deps: ProxyDeps, tenant: str, session: str, query: str | None, messages: list[ChatMessage]
) -> Recall | None:
    if not query:
        return None
    work = deps.memory.recall(tenant, query[-MAX_QUERY_CHARS:], session=session)
    found = await guarded(deps, "recall", work, deps.settings.recall_timeout_s)
    if found is None:
        return None
    return without_known(found, session, messages, deps.memory.settings.recall_budget_chars)


def without_known(
    recall: Recall, session: str, messages: Sequence[ChatMessage], budget_chars: int
) -> Recall:
    """The recall without the turns of this session the request already carries."""
    carried = {strip_injected(text_of(m.get("content"))) for m in messages}
    kept = [hit for hit in recall.hits if not _carried(hit, session, carried)]
    if len(kept) == len(recall.hits):
        return recall
    context = render_recall(kept, budget_chars) if kept else ""
    return Recall(kept, context, recall.stable, {**recall.stats, "context_chars": len(context)})


def _carried(hit: Hit, session: str, carried: set[str]) -> bool:
    return hit.layer is Layer.L0 and hit.session == session and hit.text.strip() in carried


async def _compact(
    deps: ProxyDeps, tenant: str, session: str, messages: list[ChatMessage], budget: int
) -> Compaction | None:
    offload = deps.offload
    if offload is None or budget <= 0:
        return None
    if level_for(context_tokens(messages), budget, offload.deps.settings) is Level.NONE:
        return None
    work = offload.compact(tenant, session, messages, budget)
    compacted = await guarded(deps, "compaction", work, deps.settings.recall_timeout_s)
    if compacted is not None and compacted.level is not Level.NONE:
        deps.count("proxy_compactions", 1)
    return compacted


def _put_refs(compaction: Compaction) -> bool:
    """Whether the compacted context names refs (a result replaced, or history dropped)."""
    return bool(compaction.replaced) or compaction.dropped_messages > 0


def with_blocks(messages: Sequence[ChatMessage], stable: str, context: str) -> list[ChatMessage]:
    """`messages` with the stable block in the leading system message and the per-turn block
    before the words of the last user message."""
    sent = list(messages)
    if context:
        at = last_user_index(sent)
        if at is not None:
            sent[at] = {**sent[at], "content": _before(context, sent[at].get("content"))}
    if stable:
        if sent and sent[0].get("role") in SYSTEM_ROLES:
            sent[0] = {**sent[0], "content": _after(sent[0].get("content"), stable)}
        else:
            sent.insert(0, {"role": "system", "content": stable})
    return sent


def _before(block: str, content: object) -> object:
    if isinstance(content, list):
        return [{"type": "text", "text": block}, *content]
    return f"{block}\n\n{content if isinstance(content, str) else ''}"


def _after(content: object, block: str) -> object:
    if isinstance(content, list):
        return [*content, {"type": "text", "text": block}]
    if isinstance(content, str) and content:
        return f"{content}\n\n{block}"
    return block

