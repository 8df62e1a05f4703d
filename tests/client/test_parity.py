"""One scenario through the embedded `AsyncMemory` and through `AsyncClient` on a service over
the same kind of store: every answer is the same record (the invariant that lets code move
between the two by changing the constructor)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratamem.api import Services, create_app
from stratamem.client import AsyncClient
from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import Hit
from stratamem.errors import InvalidInput, NotFound
from stratamem.protocol import MemoryAPI
from tests.api.conftest import core_settings, new_caller, open_services
from tests.api.test_offload_routes import _run_queued_stages

TENANT, SESSION = "alice", "s1"
LOG = "collected 40 items\n" + "test_login PASSED\n" * 200 + "1 failed: test_logout\n"


@dataclass
class Side:
    api: MemoryAPI
    run_stages: Callable[[], Awaitable[object]]


@asynccontextmanager
async def embedded_side(tmp_path: Path) -> AsyncIterator[Side]:
    memory = AsyncMemory.open(core_settings(tmp_path / "e"), clock=ManualClock(), llm=None)
    yield Side(memory, memory.run_offload)
    await memory.aclose()


@asynccontextmanager
async def remote_side(tmp_path: Path) -> AsyncIterator[Side]:
    services: Services = open_services(tmp_path / "r")
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://s.test") as admin:
        caller = await new_caller(admin, TENANT)
    client = AsyncClient("http://s.test", caller.token, transport=transport)
    yield Side(client, lambda: _run_queued_stages(services))
    await client.aclose()
    await services.aclose()


async def _scenario(side: Side) -> list[Any]:
    """Every call of `MemoryAPI`, in an order where each has something to show."""
    api, seen = side.api, []
    turns = [{"role": "user", "content": "I adopted a dog called Biscuit", "id": "u1"},
             {"role": "human", "content": "Always answer in kilometres", "id": "u2"}]  # fmt: skip
    seen.append(await api.capture(TENANT, SESSION, turns))
    seen.append(await api.turns(TENANT, SESSION))
    seen.append(await api.turns(TENANT, SESSION, after_seq=1, limit=5))
    seen.append(_found(await api.search(TENANT, "dog Biscuit", k=5)))
    seen.append(_found(await api.search(TENANT, "dog", layers=["L0"], sessions=[SESSION])))
    recalled = await api.recall(TENANT, "what is my dog called?", session=SESSION)
    seen.append((recalled.context, recalled.stable, _found(recalled.hits)))
    seen.append(await api.flush(TENANT, SESSION))
    stated = await api.add_memory(TENANT, "Prefers tea to coffee", type="persona")
    seen += [stated, await api.add_memory(TENANT, "Prefers tea to coffee")]
    seen.append(await api.get_memory(TENANT, stated.id))
    updated = await api.update_memory(TENANT, stated.id, content="Prefers green tea", priority=70)
    seen += [updated, await api.memory_history(TENANT, updated.id)]
    seen.append(await api.forget_memory(TENANT, updated.id))
    again = await api.add_memory(TENANT, "Prefers green tea", priority=70)
    assert again.id != updated.id and again.is_current  # a forgotten fact stated anew
    seen.append(again)
    seen.append(await api.add_memory(TENANT, "Prefers tea to coffee", metadata={"key": "k1"}))
    seen.append(await api.list_memories(TENANT, limit=100))
    seen.append(await api.list_memories(TENANT, types=["persona"], as_of=updated.valid_from))
    seen += [await api.scenes(TENANT), await api.profile(TENANT), await api.profile_history(TENANT)]
    scenes = await api.scenes(TENANT)
    seen.append(await api.scene_history(TENANT, scenes[0].id) if scenes else None)
    seen += await _offload(side)
    stats = await api.stats(TENANT)
    seen.append({layer: stats[layer] for layer in ("L0", "L1")})
    seen.append(await api.erase_session(TENANT, SESSION))
    return seen


async def _offload(side: Side) -> list[Any]:
    api, seen = side.api, []
    seen.append(await api.offload_user_message(TENANT, "task", "Fix the login tests", id="m1"))
    pairs = [{"call_id": f"c{i}", "tool": "pytest", "result": LOG} for i in range(8)]
    seen.append(await api.offload_tool_results(TENANT, "task", pairs))
    await side.run_stages()
    entries = await api.offload_entries(TENANT, "task")
    seen.append([replace(e, created_at=0.0) for e in entries])
    messages = [{"role": "user", "content": "Fix the login tests"}] + [
        {"role": "tool", "tool_call_id": f"c{i}", "content": LOG} for i in range(8)
    ]
    seen.append(await api.compact(TENANT, "task", messages, 2000))
    seen.append(await api.read_back(TENANT, entries[0].ref_id, query="test_logout", max_tokens=50))
    seen.append(await api.offload_diagrams(TENANT, "task"))
    return seen


def _found(hits: list[Hit]) -> list[tuple[str, str, str]]:
    return [(h.id, h.layer.value, h.text) for h in hits]


async def test_embedded_and_remote_answer_the_same_records(tmp_path: Path) -> None:
    async with embedded_side(tmp_path) as embedded, remote_side(tmp_path) as remote:
        here, there = await _scenario(embedded), await _scenario(remote)
    assert len(here) == len(there)
    for step, (mine, theirs) in enumerate(zip(here, there, strict=True)):
        assert mine == theirs, f"step {step} differs"
    assert here[-2]["L0"]["records"] == 2 and here[-1]["turns"] == 2


@pytest.fixture(params=["embedded", "remote"])
async def side(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Side]:
    opened = embedded_side if request.param == "embedded" else remote_side
    async with opened(tmp_path) as found:
        yield found


async def test_both_raise_the_same_errors(side: Side) -> None:
    with pytest.raises(NotFound):
        await side.api.get_memory(TENANT, "m_000000000000000000000000")
    with pytest.raises(InvalidInput):
        await side.api.capture(TENANT, SESSION, [{"role": "narrator", "content": "x"}])
    with pytest.raises(InvalidInput):
        await side.api.add_memory(TENANT, "x", priority=101)
    with pytest.raises(InvalidInput):
        await side.api.add_memory(TENANT, "x", type="opinion")
    with pytest.raises(InvalidInput):
        await side.api.list_memories(TENANT, limit=0)
    with pytest.raises(InvalidInput):
        await side.api.turns(TENANT, "no such/session")
