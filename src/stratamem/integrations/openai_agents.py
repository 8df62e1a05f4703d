"""OpenAI Agents SDK: a `Session` whose conversation history is stratamem's L0, with recall.

    from agents import Runner, RunConfig
    from stratamem import Memory                      # or stratamem.client.Client(url, key)
    from stratamem.integrations.openai_agents import StratamemSession

    session = StratamemSession(Memory(data_dir="./my-memory"), tenant="maya", session_id="chat-1")
    result = await Runner.run(agent, "hi", session=session,
                              run_config=RunConfig(session_input_callback=session.with_recall))

Every item the runner adds is captured verbatim as a turn of the session (its text as the turn's
text, so search, recall and the memory layers see it; the item itself in the turn's metadata, so
`get_items` gives it back as it was). `with_recall`, as the run's `session_input_callback`, puts
a system message with the recall blocks for the new input (the profile and scene index, and the
memories relevant to this turn) before the history; the blocks are tagged, so capture never stores
them back. `clear_session` forgets the session (its turns and what was distilled from them).
`pop_item` is refused: stratamem keeps conversation verbatim and append-only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory import SessionABC, SessionSettings

from stratamem.core import MAX_PAGE
from stratamem.domain import Turn
from stratamem.errors import Unavailable
from stratamem.facade import SyncFacade

#: The metadata key of the item a turn was captured from.
ITEM_KEY = "openai_agents_item"
#: Items larger than this (as JSON) keep their text only in the turn's text.
MAX_ITEM_JSON_CHARS = 12_000
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class StratamemSession(SessionABC):
    """The conversation of `session_id` (a stratamem session) of `tenant`."""

    def __init__(
        self,
        memory: SyncFacade,
        tenant: str,
        session_id: str,
        *,
        recall_k: int | None = None,
        settings: SessionSettings | None = None,
    ) -> None:
        self.memory = memory
        self.tenant = tenant
        self.session_id = session_id
        self.recall_k = recall_k
        self.session_settings = settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        turns = await self.memory.run_async(self._all_turns())
        items = [_item_of(turn) for turn in turns]
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def _all_turns(self) -> list[Turn]:
        found: list[Turn] = []
        while True:
            after = found[-1].seq if found else 0
            page = await self.memory.core.turns(
                self.tenant, self.session_id, after_seq=after, limit=MAX_PAGE
            )
            found += page
            if len(page) < MAX_PAGE:
                return found

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        messages = [_message_of(cast(Mapping[str, Any], item)) for item in items]
        if messages:
            await self.memory.run_async(
                self.memory.core.capture(self.tenant, self.session_id, messages)
            )

    async def pop_item(self) -> TResponseInputItem | None:
        raise Unavailable(
            "stratamem keeps conversation verbatim and append-only: a turn cannot be taken back"
            " (clear_session forgets the whole session)"
        )

    async def clear_session(self) -> None:
        await self.memory.run_async(self.memory.core.erase_session(self.tenant, self.session_id))

    async def with_recall(
        self, history: list[TResponseInputItem], new_items: list[TResponseInputItem]
    ) -> list[TResponseInputItem]:
        """`session_input_callback`: the recall blocks for the new input, then the history and
        the new input."""
        query = " ".join(_text_of(cast(Mapping[str, Any], i)) for i in new_items).strip()
        if not query:
            return history + new_items
        recall = await self.memory.run_async(self.memory.core.recall(
            self.tenant, query, session=self.session_id, k=self.recall_k
        ))  # fmt: skip
        blocks = "\n\n".join(b for b in (recall.stable, recall.context) if b)
        if not blocks:
            return history + new_items
        note = cast(TResponseInputItem, {"role": "system", "content": blocks})
        return [note, *history, *new_items]


def _message_of(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message capture stores for an item: its text, and the item to give back."""
    text = _text_of(item)
    kept: dict[str, Any] = dict(item)
    if len(json.dumps(kept, ensure_ascii=False)) > MAX_ITEM_JSON_CHARS:
        kept = {**_without_text(item), "_text_in_turn": True}
    return {
        "role": _role_of(item),
        "content": text or "(empty)",
        "id": uuid.uuid4().hex,  # item ids repeat (chat completions items share a fake id)
        "metadata": {ITEM_KEY: kept},
    }


def _role_of(item: Mapping[str, Any]) -> str:
    kind = item.get("type", "message")
    if kind == "function_call_output":
        return "tool"
    if kind == "message" or "role" in item:
        return _ROLES.get(str(item.get("role")), "assistant")
    return "assistant"


def _text_of(item: Mapping[str, Any]) -> str:
    """What a person would read of an item."""
    kind = item.get("type", "message")
    if kind == "function_call":
        return f"{item.get('name')}({item.get('arguments', '')})"
    if kind == "function_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    summary = item.get("summary")
    if isinstance(summary, list):
        return "\n".join(str(p.get("text", "")) for p in summary if isinstance(p, Mapping))
    return json.dumps(dict(item), ensure_ascii=False)


def _without_text(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("content", "output", "arguments")}


def _item_of(turn: Turn) -> TResponseInputItem:
    """The item a turn was captured from (a plain message for turns captured otherwise)."""
    kept = turn.metadata.get(ITEM_KEY)
    if not isinstance(kept, dict):
        role = turn.role.value if turn.role.value != "tool" else "user"
        return cast(TResponseInputItem, {"role": role, "content": turn.text})
    if not kept.pop("_text_in_turn", False):
        return cast(TResponseInputItem, kept)
    kind = kept.get("type", "message")
    field = {"function_call_output": "output", "function_call": "arguments"}.get(kind, "content")
    text = turn.text if field != "arguments" else turn.text.partition("(")[2].removesuffix(")")
    return cast(TResponseInputItem, {**kept, field: text})
