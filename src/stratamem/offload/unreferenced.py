"""Entries made at compaction time for tool results that have none yet.

Compaction never drops a tool result without a ref. When a result it would drop has no entry
(its summary failed, or offload-l1 has not run yet), `offline_entries` makes one now from the
chat messages: the tool message's content as the result (what the agent had in its context, so
read-back gives exactly that), the tool name and arguments of the assistant's call, the offline
summary and score. The entry and its ref are stored in one transaction; the pending pair of the
same call id, if any, is then done (its ref exists).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.domain import Scope
from stratamem.offload.offline import offline_entry
from stratamem.offload.stage import StageDeps, ref_id_for
from stratamem.store.offload.records import ClaimCommit, Entry, ToolPair

UNKNOWN_TOOL = "tool"


async def offline_entries(
    deps: StageDeps,
    tenant: str,
    session: str,
    messages: Sequence[Mapping[str, Any]],
    call_ids: Sequence[str],
) -> list[Entry]:
    """The entries of `call_ids` (valid identifiers), made offline where they do not exist."""
    now = deps.clock.now()
    pairs = _pairs(messages, set(call_ids), now)
    entries = [offline_entry(p, deps.settings.summary_max_chars) for p in pairs]
    refs = {p.call_id: ref_id_for(session, p.call_id) for p in pairs}
    scope = Scope(tenant)

    def store() -> list[Entry]:
        claim = f"compaction-{deps.ids.new_id()}"
        deps.store.complete_claim(scope, session, ClaimCommit(claim, entries, refs, now))
        return deps.store.list_entries(scope, session, list(call_ids))

    return await asyncio.to_thread(store)


def _pairs(messages: Sequence[Mapping[str, Any]], wanted: set[str], now: float) -> list[ToolPair]:
    calls = _calls(messages)
    pairs: list[ToolPair] = []
    for message in messages:
        call_id = message.get("tool_call_id")
        if message.get("role") != "tool" or call_id not in wanted:
            continue
        tool, params = calls.get(str(call_id), (str(message.get("name") or UNKNOWN_TOOL), {}))
        pairs.append(ToolPair(str(call_id), tool[:200] or UNKNOWN_TOOL, params,
                              _text(message.get("content")), now))  # fmt: skip
        wanted.discard(str(call_id))
    return pairs


def _calls(messages: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """call id → (tool name, arguments) from the assistants' `tool_calls`."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
                continue
            function = call.get("function")
            if not isinstance(function, Mapping):
                function = {}
            name = str(function.get("name") or UNKNOWN_TOOL)
            found[call["id"]] = (name, _arguments(function.get("arguments")))
    return found


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str) or not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _text(content: Any) -> str:
    """A message content as text: a string as it is, content parts' texts joined, else JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, Mapping)]
        if all(isinstance(t, str) for t in texts) and texts:
            return "\n".join(str(t) for t in texts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)
