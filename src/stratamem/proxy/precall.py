"""Before the upstream call: recall for the user's last message, compaction over budget, and
the request rewritten with both.

- The stable block (profile, scene index) is appended to the system prompt (or is one, when
  there is none): what comes before it, the client's system prompt, stays byte for byte a
  prefix the upstream's prompt cache can reuse, and the block itself changes only when the
  layers rewrite the profile.
- The per-turn block goes before the words of the user's last message, in that message only:
  every earlier message stays as the client sent it, so the cached prefix reaches up to it.
  (Where each goes in a request is the dialect's: `dialects`.)
- Recalled turns the request already carries (this conversation's own turns) are left out of
  the block; both blocks are tagged (`<stratamem-recall>`, `<stratamem-profile>`) so capture
  strips them if they ever come back.
- Recall and compaction run side by side, each within `recall_timeout_s`; either may be skipped
  (`deps.guarded`), and the request then goes as it came, without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stratamem.capture import strip_injected
from stratamem.domain import Hit, Layer, Recall
from stratamem.offload import Compaction, Level
from stratamem.offload.compaction import level_for
from stratamem.offload.tokens import context_tokens
from stratamem.proxy.chat import ChatMessage, last_user_index, text_of
from stratamem.proxy.deps import ProxyDeps, guarded
from stratamem.proxy.dialects import Dialect
from stratamem.retrieval.render import render_recall
from stratamem.retrieval.search import MAX_QUERY_CHARS


@dataclass(frozen=True, slots=True)
class Prepared:
    """The request as it goes upstream, and what was done to it."""

    body: dict[str, Any]
    view: list[ChatMessage] = field(default_factory=list)
    """The conversation as the client sent it, as chat messages (what is captured)."""
    recalled: bool = False
    compaction: Level = Level.NONE
    offered_tool: bool = False


async def prepare(
    deps: ProxyDeps,
    dialect: Dialect,
    tenant: str,
    session: str,
    body: dict[str, Any],
    budget_tokens: int,
    messages: list[ChatMessage],
) -> Prepared:
    """The request for the upstream; `messages` is the dialect's view of it."""
    if not messages:
        return Prepared(body)  # not a conversation: the upstream's to refuse
    at = last_user_index(messages)
    query = None if at is None else strip_injected(text_of(messages[at].get("content")))
    recalled, compacted = await asyncio.gather(
        _recall(deps, tenant, session, query, messages),
        _compact(deps, tenant, session, messages, budget_tokens),
    )
    stable, context = (recalled.stable, recalled.context) if recalled else ("", "")
    sent = dialect.rewrite(body, compacted.messages if compacted else None, stable, context)
    level = compacted.level if compacted is not None else Level.NONE
    offer = compacted is not None and _put_refs(compacted) and dialect.allows_tools(body)
    if offer:
        sent = dialect.with_tool(sent)
    return Prepared(sent, messages, recalled is not None, level, offer)


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
