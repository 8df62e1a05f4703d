"""An outage heals by itself (issue 24): 150 s of HTTP 500 to every call, then 60 s of replies
slower than the timeout, then 30 s of truncated replies, then good replies, while turns and tool
results keep arriving; within 5 minutes of recovery every user turn is covered by a memory,
nothing is owed, and no dead letter and no open failure record is left, with no retry or
requeue called by anyone.

One worker and the backlog scheduler over each backend (SQLite, Redis), run step by step on a manual
clock (every second of the simulation: due timers pumped, one scheduler pass, every ready task
handled), against the scripted OpenAI-compatible server whose replies follow that clock. The
settings are scaled (a 10 s breaker cool-down, quarantine retries after 20 s, 40 s, 80 s), so
the simulated minutes take seconds; only the slow replies take wall time (0.2 s each, the
client's timeout).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLMClient
from stratamem.offload import Offload, OffloadSettings, ToolPair
from stratamem.offload.executors import PipelineScheduler, register_executors
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.worker import Outcome, Worker
from stratamem.store.failures.records import FailureQuery, FailureStatus
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.testing import RecordedRequest, RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import l1_reply, l2_reply, l3_reply, reconcile_reply

from ..offload import model
from .conftest import START, llm_settings

TENANTS = ("acme", "globex")
SESSIONS = [(TENANTS[i % 2], f"s{i}") for i in range(4)]
SERVER_ERRORS_S, SLOW_S, TRUNCATED_S = 150.0, 60.0, 30.0
RECOVERY_AT = SERVER_ERRORS_S + SLOW_S + TRUNCATED_S
PRODUCE_UNTIL = RECOVERY_AT + 30.0  # turns keep coming a little after the recovery
HEALED_WITHIN_S = 300.0
STEP_S = 1.0
TIMEOUT_S = 0.2


def outage(elapsed: float) -> Reply | None:
    """What the endpoint answers `elapsed` seconds into the test (None: a good reply)."""
    if elapsed < SERVER_ERRORS_S:
        return Reply.error(500, "upstream overloaded")
    if elapsed < SERVER_ERRORS_S + SLOW_S:
        return Reply.held(Reply.json({}))  # answered after the client gave up
    if elapsed < RECOVERY_AT:
        return Reply.truncated('{"memories": [{"type": "episodic", "content": "The')
    return None


GOOD: dict[str, Callable[[RecordedRequest], Reply]] = {
    "L1": l1_reply, "L1-reconcile": reconcile_reply, "L2": l2_reply, "L3": l3_reply,
    "offload-l1": model.summaries, "offload-l2": model.diagram,
    "offload-l15": lambda request: model.judgment("Fix the build"),
}  # fmt: skip


@dataclass
class Deployment:
    memory: AsyncMemory
    offload: Offload
    offload_store: SqlOffloadStore
    backend: PipelineBackend
    worker: Worker
    scheduler: BacklogScheduler
    clock: ManualClock
    outcomes: list[Outcome]

    @property
    def elapsed(self) -> float:
        return self.clock.now() - START

    async def step(self) -> None:
        """One simulated second: due timers, one scheduler pass, every ready task."""
        self.clock.advance(STEP_S)
        await self.worker.pump_once()
        await self.scheduler.run_pass(self.clock.now())
        for _ in range(200):
            ready = await self.backend.consume("c", count=1, block_ms=0, now=self.clock.now())
            if not ready:
                return
            self.outcomes.append(await self.worker.handle(ready[0]))
        pytest.fail("a step never ran out of ready tasks")


async def _keeper_pause(seconds: float) -> None:
    await asyncio.sleep(0.005)  # the lock keeper renews while a call is in flight


REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock, scripted_llm: ScriptedLLM
) -> AsyncIterator[Deployment]:
    for stage, good in GOOD.items():
        scripted_llm.on(stage, lambda r, good=good: outage(clock.now() - START) or good(r))
    options = {"timeout_s": TIMEOUT_S, "max_attempts": 2, "breaker_failures": 3,
               "breaker_cooldown_s": 10.0}  # fmt: skip
    llm = LLMClient(llm_settings(scripted_llm, **options), clock=clock, sleep=RecordingSleep())
    layers = LayerSettings(l1_every_turns=2, idle_timeout_s=5, max_batch_turns=6, l2_delay_s=5,
                           l2_min_interval_s=5, catch_up_quiet_s=5,
                           quarantine_retry_s=[20, 40, 80])  # fmt: skip
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64", background_embedding=False)
    memory = AsyncMemory.open(settings, clock=clock, llm=llm, layer_settings=layers)
    backend: PipelineBackend = (
        SqliteBackend(tmp_path / "pipeline.db") if request.param == "sqlite"
        else RedisBackend(REDIS_URL, prefix=f"test-outage:{uuid.uuid4().hex}:")
    )  # fmt: skip
    offload_store = SqlOffloadStore(memory.store)  # type: ignore[arg-type]
    offload = Offload(offload_store, PipelineScheduler(backend, clock), llm=llm, clock=clock,
                      settings=OffloadSettings(l1_delay_s=2, diagram_delay_s=2))  # fmt: skip
    registry = ExecutorRegistry()
    memory.layer_executors(backend).registry(registry)
    register_executors(registry, offload)
    pipeline = PipelineSettings(retry_limit=3, l2_delay_s=5, scheduler_limit=16,
                                scheduler_grace_s=1, scheduler_in_flight_s=30,
                                scheduler_park_refresh_s=0)  # fmt: skip
    worker = Worker(backend, registry, pipeline, clock=clock, name="w", sleep=_keeper_pause)
    scheduler = BacklogScheduler(backend, registry.backlog_sources(pipeline.scheduler_grace_s),
                                 pipeline)  # fmt: skip
    yield Deployment(memory, offload, offload_store, backend, worker, scheduler, clock, [])
    scripted_llm.release()
    if isinstance(backend, RedisBackend):
        await backend.drop_all()
    await backend.close()
    await memory.aclose()
    await llm.aclose()


async def produce(d: Deployment, second: int) -> None:
    """Every 10 s a user turn in each session; every 30 s a user message and tool results."""
    if second % 10:
        return
    now = d.clock.now()
    for tenant, session in SESSIONS:
        turn = {"role": "user", "speaker": "Maria", "text": f"At {second} s I was in {session}."}
        await d.memory.capture(tenant, session, [turn])
        if second % 30 == 0:
            await d.offload.user_message(tenant, session, f"Fix build {second}", timestamp=now)
            pairs = [ToolPair(f"c{second}-{i}", "grep", {}, f"hit {i}\n" * 20, now + 0.001 * i)
                     for i in range(2)]  # fmt: skip
            await d.offload.ingest(tenant, session, pairs)


def open_failures(d: Deployment) -> list[str]:
    layers = d.memory.layer_service().layers
    query = FailureQuery(status=FailureStatus.OPEN, limit=1000)
    return [f"{f.stage}/{f.kind.value}: {f.error}" for t in TENANTS
            for f in layers.list_failures(Scope(t), query)]  # fmt: skip


def uncovered_user_turns(d: Deployment) -> list[str]:
    missing = []
    for tenant in TENANTS:
        scope = Scope(tenant)
        cited = {t for m in d.memory.store.list_memories(scope, limit=10_000)
                 for t in m.source_turn_ids}  # fmt: skip
        for t_tenant, session in SESSIONS:
            if t_tenant == tenant:
                missing += [t.id for t in d.memory.store.list_turns(scope, session, 0, 10_000)
                            if t.id not in cited]  # fmt: skip
    return missing


async def owed(d: Deployment) -> dict[str, int]:
    backlog = d.memory.backlog
    assert backlog is not None
    found = {
        "L1": len(backlog.sessions_owing_l1(None, 100)),
        "L2": len(backlog.tenants_owing_l2(None, 100)),
        "offload": len(d.offload_store.sessions_owing(None, d.clock.now(), 100)),
        "unmapped": sum(1 for t, s in SESSIONS
                        for e in d.offload_store.list_entries(Scope(t), s) if not e.node_id),
        "dead": len(await d.backend.list_dead(limit=100)),
        "open failures": len(open_failures(d)),
        "uncovered turns": len(uncovered_user_turns(d)),
    }  # fmt: skip
    return {k: v for k, v in found.items() if v}


async def test_an_outage_heals_itself(deployment: Deployment, scripted_llm: ScriptedLLM) -> None:
    d = deployment
    second = 0
    while d.elapsed < RECOVERY_AT:
        if d.elapsed < PRODUCE_UNTIL:
            await produce(d, second)
        await d.step()
        second += 1
    during = {
        "postponed": d.outcomes.count(Outcome.POSTPONED),
        "dead": d.outcomes.count(Outcome.DEAD),
        "quarantined": sum(1 for t in TENANTS for f in d.memory.layer_service().layers
                           .list_failures(Scope(t), FailureQuery(kind=None, limit=1000))
                           if f.kind.value == "quarantine"),
    }  # fmt: skip
    assert during["postponed"] > 0 and during["dead"] == 0, during

    healed_at = None
    while d.elapsed < RECOVERY_AT + HEALED_WITHIN_S:
        if d.elapsed < PRODUCE_UNTIL:
            await produce(d, second)
        await d.step()
        second += 1
        if d.elapsed > PRODUCE_UNTIL and not await owed(d):
            healed_at = d.elapsed - RECOVERY_AT
            break
    assert await owed(d) == {}, (open_failures(d), during)
    assert healed_at is not None and healed_at <= HEALED_WITHIN_S
    assert Outcome.DEAD not in d.outcomes
    paths = {r.path for r in scripted_llm.requests}
    assert paths <= {"/v1/chat/completions", "/v1/embeddings"}  # nothing but the model's calls
    print(f"healed {healed_at:.0f} s after the recovery; during the outage: {during}")
