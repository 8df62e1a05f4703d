"""`AsyncClient`: a `stratamem serve` over HTTP, with the library's names, arguments and records.

Every call names its tenant, as with `AsyncMemory`; the service takes the tenant from the key, so
the client checks the name against its key's tenant (`GET /v1/whoami`, asked once) and refuses
another with `Forbidden` before sending anything. Answers 429, and 503 with Retry-After, are
retried as the policy allows (waiting what the service asked for); other error answers raise the
`stratamem.errors` type of their `{"error": {"type", "message"}}`; a timeout or a refused
connection raises `Unreachable`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

import httpx

from stratamem.capture import CaptureResult
from stratamem.client import records
from stratamem.client.errors import error_from
from stratamem.clock import Clock, SystemClock
from stratamem.domain import (
    Hit,
    Layer,
    MemoryRecord,
    MemoryType,
    Message,
    Profile,
    Recall,
    Scene,
    Turn,
    check_ident,
)
from stratamem.errors import ConfigError, Forbidden, Unreachable
from stratamem.httpretry import RetryPolicy, Sleep, send_with_retry
from stratamem.layers.model import FlushResult
from stratamem.offload.readback import ReadBack
from stratamem.offload.results import Compaction, DiagramsView, IngestResult
from stratamem.store.lineage.port import Lineage
from stratamem.store.offload.records import Entry, ToolPair

DEFAULT_URL = "http://127.0.0.1:8420"
#: What the service answers when it asks to be called again later.
RETRY_ON = frozenset({429, 503})
Json = Any


class AsyncClient:
    """`AsyncClient(url, key)`; `url` and `key` default to `STRATAMEM_URL` and `STRATAMEM_KEY`."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock | None = None,
    ) -> None:
        key = key or os.environ.get("STRATAMEM_KEY")
        if not key:
            raise ConfigError("no API key: pass key= or set STRATAMEM_KEY (see `keys create`)")
        self.url = url or os.environ.get("STRATAMEM_URL") or DEFAULT_URL
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._sleep, self._clock = sleep, clock or SystemClock()
        self._http = httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"},
            timeout=timeout_s, transport=transport,
        )  # fmt: skip
        self._tenant: str | None = None

    async def tenant(self) -> str:
        """The tenant of this client's key."""
        if self._tenant is None:
            answer = await self._send("GET", "/v1/whoami")
            self._tenant = str(records.field(answer, "tenant"))
        return self._tenant

    async def _call(self, tenant: str, method: str, path: str, **request: Any) -> Json:
        mine = await self.tenant()
        if tenant != mine:
            raise Forbidden(f"this client's key belongs to tenant {mine!r}, not {tenant!r}")
        return await self._send(method, path, **request)

    async def _send(self, method: str, path: str, **request: Any) -> Json:
        try:
            response = await send_with_retry(
                lambda: self._http.request(method, path, **request), self.retry,
                sleep=self._sleep, clock=self._clock, retry_on=RETRY_ON,
            )  # fmt: skip
        except httpx.TimeoutException as exc:
            raise Unreachable(f"{method} {path}: no answer within {self.timeout_s}s") from exc
        except httpx.TransportError as exc:
            raise Unreachable(f"{method} {path}: {self.url} unreachable: {exc}") from exc
        if response.is_error:
            raise error_from(response, self._clock.now())
        try:
            return response.json()
        except json.JSONDecodeError as exc:
            raise records.UnexpectedAnswer(f"{method} {path}: not JSON: {exc}") from exc

    # -- capture, search, recall -------------------------------------------------------------
    async def capture(
        self, tenant: str, session: str, messages: Sequence[Message | Mapping[str, Any]]
    ) -> CaptureResult:
        body = {"session": session, "messages": [_message(m) for m in messages]}
        return records.parse(CaptureResult, await self._call(tenant, "POST", "/v1/capture",
                                                              json=body))  # fmt: skip

    async def search(
        self,
        tenant: str,
        query: str,
        *,
        k: int = 10,
        layers: Sequence[Layer | str] = (Layer.L1, Layer.L0),
        types: Sequence[MemoryType | str] | None = None,
        sessions: Sequence[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        as_of: float | None = None,
    ) -> list[Hit]:
        body = _present(
            query=query, k=k, layers=[str(layer) for layer in layers], sessions=sessions,
            types=None if types is None else [str(t) for t in types],
            since=since, until=until, as_of=as_of,
        )  # fmt: skip
        return records.hits(await self._call(tenant, "POST", "/v1/search", json=body))

    async def recall(
        self,
        tenant: str,
        query: str,
        *,
        session: str | None = None,
        k: int | None = None,
        budget_chars: int | None = None,
        include_turns: bool = True,
    ) -> Recall:
        body = _present(query=query, session=session, k=k, budget_chars=budget_chars,
                        include_turns=include_turns)  # fmt: skip
        return records.recall(await self._call(tenant, "POST", "/v1/recall", json=body))

    async def turns(
        self, tenant: str, session: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Turn]:
        path = f"/v1/sessions/{_session(session)}/turns"
        answer = await self._call(tenant, "GET", path, params={"after": after_seq, "limit": limit})
        found = records.parse_list(dict, answer)
        return [records.parse(Turn, {**t, "tenant": tenant}) for t in found]

    async def flush(self, tenant: str, session: str) -> FlushResult:
        """Run the layers for a session now and wait (`POST …/flush?wait=true`)."""
        path = f"/v1/sessions/{_session(session)}/flush"
        answer = await self._call(tenant, "POST", path, params={"wait": "true"})
        return records.parse(FlushResult, records.field(answer, "result"))

    async def stats(self, tenant: str) -> dict[str, Any]:
        return records.parse(dict, await self._call(tenant, "GET", "/v1/stats"))

    async def retry_failures(
        self,
        tenant: str,
        *,
        session: str | None = None,
        stage: str | None = None,
        kind: str | None = None,
    ) -> dict[str, Any]:
        """Re-run now the open quarantined turns and failed stages of a session, stage or kind
        (`POST /v1/failures/retry`): the ids resolved, still open, skipped, and failed."""
        filters = {"session": session, "stage": stage, "kind": kind}
        params = {name: value for name, value in filters.items() if value is not None}
        answer = await self._call(tenant, "POST", "/v1/failures/retry", params=params)
        return records.parse(dict, answer)

    async def erase_session(self, tenant: str, session: str) -> dict[str, int]:
        answer = await self._call(tenant, "DELETE", f"/v1/sessions/{_session(session)}")
        return records.parse(dict[str, int], records.field(answer, "erased"))

    async def erase_turn(self, tenant: str, turn_id: str) -> dict[str, int]:
        answer = await self._call(tenant, "DELETE", f"/v1/turns/{_seg(turn_id)}")
        return records.parse(dict[str, int], records.field(answer, "erased"))

    async def erase_memory(self, tenant: str, memory_id: str) -> dict[str, int]:
        answer = await self._call(tenant, "POST", f"/v1/memories/{_seg(memory_id)}/erase")
        return records.parse(dict[str, int], records.field(answer, "erased"))

    async def memory_lineage(self, tenant: str, memory_id: str) -> Lineage:
        answer = await self._call(tenant, "GET", f"/v1/memories/{_seg(memory_id)}/lineage")
        return records.parse(Lineage, answer)

    async def scene_lineage(self, tenant: str, scene_id: str, version: int = 0) -> Lineage:
        path = f"/v1/scenes/{_seg(scene_id)}/lineage"
        answer = await self._call(tenant, "GET", path, params={"version": version})
        return records.parse(Lineage, answer)

    async def profile_lineage(self, tenant: str, version: int = 0) -> Lineage:
        answer = await self._call(tenant, "GET", "/v1/profile/lineage",
                                  params={"version": version})  # fmt: skip
        return records.parse(Lineage, answer)

    # -- memories ----------------------------------------------------------------------------
    async def add_memory(
        self,
        tenant: str,
        content: str,
        *,
        type: MemoryType | str = MemoryType.PERSONA,
        session: str | None = None,
        priority: int = 50,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryRecord:
        body = _present(content=content, type=str(type), session=session, priority=priority,
                        metadata=None if metadata is None else dict(metadata))  # fmt: skip
        answer = await self._call(tenant, "POST", "/v1/memories", json=body)
        return records.memory(answer, tenant)

    async def list_memories(
        self,
        tenant: str,
        *,
        types: Sequence[MemoryType | str] | None = None,
        sessions: Sequence[str] | None = None,
        as_of: float | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        params = _present(
            type=None if types is None else [str(t) for t in types],
            session=None if sessions is None else list(sessions),
            as_of=as_of, limit=limit, offset=offset,
        )  # fmt: skip
        answer = await self._call(tenant, "GET", "/v1/memories", params=params)
        return records.memories(answer, tenant)

    async def get_memory(self, tenant: str, memory_id: str) -> MemoryRecord:
        answer = await self._call(tenant, "GET", f"/v1/memories/{_seg(memory_id)}")
        return records.memory(answer, tenant)

    async def update_memory(
        self,
        tenant: str,
        memory_id: str,
        *,
        content: str | None = None,
        type: MemoryType | str | None = None,
        priority: int | None = None,
    ) -> MemoryRecord:
        body = _present(content=content, type=None if type is None else str(type),
                        priority=priority)  # fmt: skip
        path = f"/v1/memories/{_seg(memory_id)}"
        return records.memory(await self._call(tenant, "PATCH", path, json=body), tenant)

    async def forget_memory(self, tenant: str, memory_id: str) -> MemoryRecord:
        answer = await self._call(tenant, "DELETE", f"/v1/memories/{_seg(memory_id)}")
        return records.memory(answer, tenant)

    async def memory_history(self, tenant: str, memory_id: str) -> list[MemoryRecord]:
        answer = await self._call(tenant, "GET", f"/v1/memories/{_seg(memory_id)}/history")
        return records.memories(answer, tenant)

    async def scenes(self, tenant: str) -> list[Scene]:
        return records.scenes(await self._call(tenant, "GET", "/v1/scenes"), tenant)

    async def scene_history(self, tenant: str, scene_id: str) -> list[Scene]:
        answer = await self._call(tenant, "GET", f"/v1/scenes/{_seg(scene_id)}/history")
        return records.scenes(answer, tenant)

    async def profile(self, tenant: str) -> Profile | None:
        found = records.field(await self._call(tenant, "GET", "/v1/profile"), "profile")
        return None if found is None else records.profiles([found], tenant)[0]

    async def profile_history(self, tenant: str) -> list[Profile]:
        return records.profiles(await self._call(tenant, "GET", "/v1/profile/history"), tenant)

    # -- context offload ---------------------------------------------------------------------
    async def offload_tool_results(
        self, tenant: str, session: str, pairs: Sequence[ToolPair | Mapping[str, Any]]
    ) -> IngestResult:
        body = {"pairs": [_pair(p) for p in pairs]}
        path = f"/v1/offload/sessions/{_session(session)}/tool-results"
        return records.parse(IngestResult, await self._call(tenant, "POST", path, json=body))

    async def offload_user_message(
        self,
        tenant: str,
        session: str,
        text: str,
        *,
        id: str | None = None,
        timestamp: float | None = None,
    ) -> str:
        path = f"/v1/offload/sessions/{_session(session)}/user-messages"
        body = _present(text=text, id=id, timestamp=timestamp)
        return str(records.field(await self._call(tenant, "POST", path, json=body), "id"))

    async def compact(
        self,
        tenant: str,
        session: str,
        messages: Sequence[Mapping[str, Any]],
        budget_tokens: int,
    ) -> Compaction:
        path = f"/v1/offload/sessions/{_session(session)}/compact"
        body = {"messages": [dict(m) for m in messages], "budget_tokens": budget_tokens}
        return records.parse(Compaction, await self._call(tenant, "POST", path, json=body))

    async def offload_entries(self, tenant: str, session: str) -> list[Entry]:
        path = f"/v1/offload/sessions/{_session(session)}/entries"
        return records.parse_list(Entry, await self._call(tenant, "GET", path))

    async def offload_diagrams(self, tenant: str, session: str) -> DiagramsView:
        path = f"/v1/offload/sessions/{_session(session)}/diagrams"
        return records.diagrams(await self._call(tenant, "GET", path))

    async def read_back(
        self, tenant: str, ref_id: str, *, query: str | None = None, max_tokens: int | None = None
    ) -> ReadBack:
        params = _present(query=query, max_tokens=max_tokens)
        path = f"/v1/offload/refs/{_ref(ref_id)}"
        return records.parse(ReadBack, await self._call(tenant, "GET", path, params=params))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _present(**fields: Any) -> dict[str, Any]:
    """The fields that were given (None means: the service's default)."""
    return {name: value for name, value in fields.items() if value is not None}


def _seg(value: str) -> str:
    """One path segment (a record id), escaped."""
    return quote(value, safe="")


def _session(value: str) -> str:
    """A session in a path: refused here as the library refuses it."""
    return check_ident(value, "session")


def _ref(value: str) -> str:
    return check_ident(value, "ref id")


def _message(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(message, Message):
        return dict(message)
    return _present(role=str(message.role), content=message.text, speaker=message.speaker,
                    timestamp=message.timestamp, id=message.id,
                    metadata=message.metadata or None)  # fmt: skip


def _pair(pair: ToolPair | Mapping[str, Any]) -> dict[str, Any]:
    return dict(pair) if not isinstance(pair, ToolPair) else _present(**asdict(pair))
