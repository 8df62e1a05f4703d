"""LangGraph: a `BaseStore` backed by stratamem, and a set of memory tools for an agent.

    from stratamem import Memory                      # or stratamem.client.Client(url, key)
    from stratamem.integrations.langgraph import StratamemStore, memory_tools

    store = StratamemStore(Memory(data_dir="./my-memory"))
    graph = builder.compile(store=store)

Namespaces are `(tenant,)` or `(tenant, session)`. An item is an L1 memory: `put` states it
(mode `manual`, the key kept in its metadata), putting the same key again writes a new version
that supersedes the old one (`memory_history` keeps both), and `delete` forgets it (out of
search, kept in its history). A value `{"content": str, "type"?: persona|episodic|instruction,
"priority"?: 0-100}` is stored as that text; any other JSON object is stored as its JSON text and
given back as the object. `search` with a `query` is stratamem's hybrid search (BM25 and vectors,
fused) over the tenant's memories, including those the memory layers distilled from captured
conversation (their key is their memory id); without a query it lists memories, newest first.
`get` and `put` find a key by scanning the namespace's current memories (fine for thousands;
search is indexed). TTLs are not supported.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from stratamem.domain import Layer, MemoryRecord, MemoryType, memory_type
from stratamem.errors import InvalidInput, NotFound
from stratamem.facade import SyncFacade
from stratamem.protocol import MemoryAPI

#: Memories listed per page while looking for a key.
SCAN_PAGE = 500
_TEXT_KEYS = frozenset({"content", "type", "priority"})


class StratamemStore(BaseStore):
    """A LangGraph store over a `Memory` or a `Client` (the one given stays the caller's)."""

    supports_ttl = False

    def __init__(self, memory: SyncFacade) -> None:
        self.memory = memory

    @property
    def api(self) -> MemoryAPI:
        return self.memory.core

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self.memory.run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self.memory.run_async(self._batch(list(ops)))

    async def _batch(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._namespaces(op))
            else:
                raise InvalidInput(f"unknown store operation {type(op).__name__}")
        return results

    async def _get(self, op: GetOp) -> Item | None:
        tenant, session = _split(op.namespace)
        found = await self._find(tenant, session, op.key)
        return None if found is None else _item(found, op.namespace)

    async def _put(self, op: PutOp) -> None:
        if op.ttl is not None:
            raise InvalidInput("stratamem keeps memories until they are forgotten: no ttl")
        tenant, session = _split(op.namespace)
        current = await self._find(tenant, session, op.key)
        if op.value is None:
            if current is not None:
                await self.api.forget_memory(tenant, current.id)
            return
        content, kind, priority = _stored(op.value)
        if current is None:
            await self.api.add_memory(
                tenant, content, type=kind, session=session, priority=priority,
                metadata={"key": op.key, "json": not _is_text(op.value)},
            )  # fmt: skip
        elif (current.content, current.type, current.priority) != (content, kind, priority):
            await self.api.update_memory(
                tenant, current.id, content=content, type=kind, priority=priority
            )

    async def _find(self, tenant: str, session: str | None, key: str) -> MemoryRecord | None:
        """The current memory stored under `key` (or whose id is `key`) in the namespace."""
        sessions = None if session is None else [session]
        offset = 0
        while True:
            page = await self.api.list_memories(
                tenant, sessions=sessions, limit=SCAN_PAGE, offset=offset
            )
            for record in page:
                if record.metadata.get("key") == key:
                    return record
            if len(page) < SCAN_PAGE:
                break
            offset += SCAN_PAGE
        try:
            found = await self.api.get_memory(tenant, key)
        except (NotFound, InvalidInput):
            return None
        same_session = session is None or found.session == session
        return found if found.is_current and same_session else None

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        tenant, session = _split(op.namespace_prefix)
        sessions = None if session is None else [session]
        want = op.limit + op.offset
        scored: list[tuple[MemoryRecord, float | None]]
        if op.query:
            hits = await self.api.search(
                tenant, op.query, k=want, layers=[Layer.L1], sessions=sessions
            )
            scored = [(await self.api.get_memory(tenant, h.id), h.score) for h in hits]
        else:
            listed = await self.api.list_memories(tenant, sessions=sessions, limit=want)
            scored = [(record, None) for record in listed]
        items = [_search_item(r, tenant, score) for r, score in scored]
        matching = [i for i in items if _matches(i.value, op.filter)]
        return matching[op.offset : op.offset + op.limit]

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        tenant = _tenant_of(op)
        listed = await self.api.list_memories(tenant, limit=SCAN_PAGE)
        found: set[tuple[str, ...]] = {(tenant,)}
        found |= {(tenant, m.session) for m in listed if m.session}
        spaces = sorted(found)
        if op.max_depth is not None:
            spaces = sorted({s[: op.max_depth] for s in spaces})
        return spaces[op.offset : op.offset + op.limit]


def memory_tools(memory: SyncFacade, tenant: str, session: str | None = None) -> list[BaseTool]:
    """Tools an agent calls to search, state and forget memories of one tenant (and session);
    each runs from sync and async graphs alike."""
    api = memory.core

    async def search_memory(query: str, k: int = 5) -> str:
        """Search long-term memory (facts about the user, past events, standing instructions)
        for what is relevant to `query`; each line is `[id] (type) text`."""
        hits = await api.search(tenant, query, k=k, layers=[Layer.L1])
        return "\n".join(f"[{h.id}] ({h.memory_type}) {h.text}" for h in hits) or "(nothing)"

    async def remember(content: str, type: str = "persona") -> str:
        """Store one fact the user stated directly. `type`: persona (who the user is, stable
        preferences), episodic (what happened) or instruction (a standing rule for you)."""
        stored = await api.add_memory(tenant, content, type=memory_type(type), session=session)
        return f"remembered [{stored.id}]"

    async def forget_memory(memory_id: str) -> str:
        """Forget a memory by its id (from search_memory) when the user says it is wrong."""
        await api.forget_memory(tenant, memory_id)
        return f"forgot [{memory_id}]"

    return [_tool(memory, call) for call in (search_memory, remember, forget_memory)]


def _tool(memory: SyncFacade, call: Callable[..., Coroutine[Any, Any, str]]) -> BaseTool:
    """A tool running `call` on the memory's loop, from a sync or an async caller."""

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> str:
        return memory.run(call(*args, **kwargs))

    @functools.wraps(call)
    async def run_async(*args: Any, **kwargs: Any) -> str:
        return await memory.run_async(call(*args, **kwargs))

    return StructuredTool.from_function(func=run, coroutine=run_async, name=call.__name__)


def _split(namespace: tuple[str, ...]) -> tuple[str, str | None]:
    if len(namespace) == 1:
        return namespace[0], None
    if len(namespace) == 2:
        return namespace[0], namespace[1]
    raise InvalidInput(f"a stratamem namespace is (tenant,) or (tenant, session), not {namespace}")


def _tenant_of(op: ListNamespacesOp) -> str:
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix" and condition.path and condition.path[0] != "*":
            return str(condition.path[0])
    raise InvalidInput("list_namespaces needs a prefix naming the tenant")


def _is_text(value: Mapping[str, Any]) -> bool:
    return isinstance(value.get("content"), str) and set(value) <= _TEXT_KEYS


def _stored(value: Mapping[str, Any]) -> tuple[str, MemoryType, int]:
    """The text, type and priority a value is stored as."""
    if _is_text(value):
        priority = value.get("priority", 50)
        if not isinstance(priority, int):
            raise InvalidInput(f"priority must be an integer, not {priority!r}")
        return str(value["content"]), memory_type(value.get("type", "persona")), priority
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False), MemoryType.PERSONA, 50
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a store value must be JSON: {exc}") from exc


def _value(record: MemoryRecord) -> dict[str, Any]:
    if record.metadata.get("json"):
        loaded: dict[str, Any] = json.loads(record.content)
        return loaded
    return {"content": record.content, "type": record.type.value, "priority": record.priority}


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _key(record: MemoryRecord) -> str:
    key = record.metadata.get("key")
    return key if isinstance(key, str) else record.id


def _item(record: MemoryRecord, namespace: tuple[str, ...]) -> Item:
    return Item(
        value=_value(record), key=_key(record), namespace=namespace,
        created_at=_when(record.created_at), updated_at=_when(record.updated_at),
    )  # fmt: skip


def _search_item(record: MemoryRecord, tenant: str, score: float | None) -> SearchItem:
    namespace = (tenant,) if record.session is None else (tenant, record.session)
    return SearchItem(namespace, _key(record), _value(record), _when(record.created_at),
                      _when(record.updated_at), score)  # fmt: skip


def _matches(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    return all(value.get(name) == expected for name, expected in (wanted or {}).items())
