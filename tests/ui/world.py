"""A small world for the inspector's tests, made through the service's own routes over the
scripted model: two tenants, alice with conversations distilled through L1/L2/L3, a corrected
memory, a quarantined turn, offloaded tool calls with a task diagram, and a dead letter; bob
with a secret of his own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from stratamem.api import ServerSettings, Services, create_app
from stratamem.api.background import Background
from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.layers.task_types import L2
from stratamem.llm import LLMClient, LLMSettings
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply
from tests.api.conftest import ADMIN, ADMIN_KEY, Caller, core_settings, message, new_caller
from tests.offload import model

TRIP = [
    "I adopted a dog called Biscuit last spring",
    "My sister Lena visits on Sundays and we cook together",
    "I am planning a hiking trip to the Dolomites in July",
]
GARDEN = ["I grow purple beans in my allotment"]
BOB_SECRET = "My locker code at the climbing gym is pineapple"
PROSE = "Sure! Here is what I think about your day."
CALL_RESULT = "line of the build log\n" * 40 + "ERROR: disk quota exceeded on /var\n"
FAR_FUTURE = 4_102_444_800.0  # 2100-01-01: the manual clock's deliveries are all due by then


@dataclass
class World:
    data_dir: Path
    alice: Caller
    bob: Caller
    llm_url: str


def llm_client(base_url: str) -> LLMClient:
    settings = LLMSettings(base_url=base_url, model="scripted-chat", max_attempts=1)
    return LLMClient(settings, sleep=RecordingSleep())


def open_services(data_root: Path, base_url: str) -> tuple[Services, LLMClient]:
    """The service over the world's files, its layers and offload calling `base_url`."""
    llm = llm_client(base_url)
    memory = AsyncMemory.open(core_settings(data_root), clock=ManualClock(), llm=llm)
    backend = SqliteBackend(data_root / "data" / "pipeline.db")
    return Services.over(memory, ServerSettings(admin_key=ADMIN_KEY), backend), llm


def install_model(llm: ScriptedLLM) -> None:
    install_layer_handlers(llm)
    llm.on("offload-l1", model.summaries)
    llm.on("offload-l2", model.diagram)
    llm.on("offload-l15", lambda request: model.judgment("Fix the failing build"))


async def _ok(response: httpx.Response) -> Any:
    assert response.is_success, response.text
    return response.json()


async def _conversation(
    c: httpx.AsyncClient, services: Services, who: Caller, session: str, texts: list[str]
) -> Any:
    services.memory.clock.advance(3600.0)  # type: ignore[attr-defined]  (a ManualClock)
    body = {"session": session, "messages": [message(t) for t in texts]}
    await _ok(await c.post("/v1/capture", json=body, headers=who.headers))
    return await _ok(await c.post(f"/v1/sessions/{session}/flush?wait=true", headers=who.headers))


async def _offload(c: httpx.AsyncClient, services: Services, who: Caller) -> None:
    path = "/v1/offload/sessions/build/"
    await _ok(await c.post(path + "user-messages", json={"text": "fix the build", "id": "u1"},
                           headers=who.headers))  # fmt: skip
    pairs = [{"call_id": f"call-{i}", "tool": "shell", "params": {"cmd": "make"},
              "result": CALL_RESULT} for i in range(3)]  # fmt: skip
    await _ok(await c.post(path + "tool-results", json={"pairs": pairs}, headers=who.headers))
    await run_queued(services)


async def run_queued(services: Services) -> int:
    """Hand every ready task to the serve worker, as the tests of the offload routes do, and
    the tasks of the timers (offload-l1 waits for a batch) as they fall due."""
    background = Background(services, PipelineSettings(), workers=1)
    backend, done = services.require_pipeline(), 0
    while True:
        await backend.fire_due_timers(now=FAR_FUTURE, limit=100)
        deliveries = await backend.consume("seed", count=10, block_ms=0, now=FAR_FUTURE)
        if not deliveries:
            return done
        for delivery in deliveries:
            await background.worker.handle(delivery)
            done += 1


async def _scheduler_pass(services: Services) -> None:
    """One pass of serve's backlog scheduler, so the admin's view has the per-kind snapshot it
    publishes (the leases it took are released again)."""
    scheduler = Background(services, PipelineSettings(), workers=1).scheduler
    assert scheduler is not None
    await scheduler.once()


async def _dead_letter(services: Services, tenant: str) -> None:
    backend = services.require_pipeline()
    await backend.enqueue(Task(L2, tenant, "trip", {"reason": "seed"}), now=0.0)
    (delivery,) = await backend.consume("seed", count=1, block_ms=0, now=0.0)
    await backend.dead_letter(delivery, "the endpoint refused every attempt", now=0.0)


async def make_world(root: Path, llm: ScriptedLLM) -> World:
    install_model(llm)
    services, client = open_services(root, llm.base_url)
    app = create_app(services)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://stratamem.test") as c:  # fmt: skip
        alice, bob = await new_caller(c, "alice"), await new_caller(c, "bob")
        await _conversation(c, services, alice, "trip", TRIP)
        memories = await _ok(await c.get("/v1/memories?session=trip", headers=alice.headers))
        dog = next(m for m in memories if "Biscuit" in m["content"])
        services.memory.clock.advance(600.0)  # type: ignore[attr-defined]
        await _ok(await c.patch(f"/v1/memories/{dog['id']}", headers=alice.headers,
                                json={"content": "Adopted a beagle called Biscuit last spring"}))
        llm.on("L1", lambda request: Reply.text(PROSE))  # the model cannot read this one
        await _conversation(c, services, alice, "garden", GARDEN)
        llm.on("L1", l1_reply)  # and can again: a retry covers the turn
        await _offload(c, services, alice)
        await _conversation(c, services, bob, "gym", [BOB_SECRET])
        await _dead_letter(services, "alice")
        await _scheduler_pass(services)
        assert (await c.get("/v1/admin/tenants", headers=ADMIN)).is_success
    await services.aclose()
    await client.aclose()
    return World(root, alice, bob, llm.base_url)
