"""A pipeline backend that loses everything (Redis restarted with nothing on disk, FLUSHALL, the
SQLite pipeline file deleted) while the store keeps the fencing tokens it accepted: the lock
token counters start again from 1, below what the store recorded, and the pipeline must still
catch up (nothing lost, nothing stalled), on the Redis backend and on the SQLite one; and when
the restarted counter grants again exactly the token a holder from before recorded, the store
accepts that token from one of the two holders only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.layers.backlog import layer_sources
from stratamem.layers.service import Run
from stratamem.layers.task_types import L1
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import LockScope, PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.pipeline.timers import lock_key_for
from stratamem.pipeline.worker import Outcome, Worker
from stratamem.store.core.port import Fence
from stratamem.testing import ScriptedLLM
from stratamem.testing.layers import install_layer_handlers
from tests.store.helpers import memory

SCOPE = Scope("acme")
REDIS_URL = "redis://127.0.0.1:6379/0"
LOCK_KEY = lock_key_for(Task(L1, "acme", "s1"), LockScope.SESSION)
RECORDED_TOKEN = 20
STEPS = 60


def _turns(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "speaker": "Maria", "text": f"I ran {n} km on day {n}."}]


@dataclass
class Rig:
    memory: AsyncMemory
    clock: ManualClock
    backend: PipelineBackend
    wipe: Callable[[], Awaitable[PipelineBackend]]  # loses the whole pipeline state

    def worker(self) -> Worker:
        registry = ExecutorRegistry()
        self.memory.layer_executors(self.backend).registry(registry)
        settings = PipelineSettings(retry_limit=1, l2_delay_s=60)
        return Worker(self.backend, registry, settings, clock=self.clock, name="w",
                      sleep=_no_sleep)  # fmt: skip

    def scheduler(self) -> BacklogScheduler:
        service = self.memory.layer_service()
        backlog = PipelineSettings(scheduler_limit=100, scheduler_grace_s=600,
                                   scheduler_in_flight_s=600)  # fmt: skip
        sources = layer_sources(self.memory.backlog, service.settings, backlog.scheduler_grace_s)
        return BacklogScheduler(self.backend, sources, backlog)

    async def run_until_settled(self) -> list[Outcome]:
        """Schedule, consume, reclaim and pump as a service would, time moving on, until the
        queue is empty and nothing is owed (bounded)."""
        worker, scheduler, outcomes = self.worker(), self.scheduler(), []
        for _ in range(STEPS):
            await scheduler.run_pass(self.clock.now())
            await worker.pump_once()
            now = self.clock.now()
            got = await self.backend.consume("c", count=10, block_ms=0, now=now)
            got += await self.backend.reclaim("c", min_idle_ms=1000, count=10, max_deliveries=5,
                                              now=now)  # fmt: skip
            outcomes += [await worker.handle(delivery) for delivery in got]
            depth = await self.backend.depth()
            if not got and depth.ready + depth.in_flight + depth.timers == 0 and self.owed() == 0:
                break
            self.clock.advance(60)
        return outcomes

    def owed(self) -> int:
        assert self.memory.layers is not None
        return self.memory.layers.session_state(SCOPE, "s1").pending_turns


async def _no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


async def _sqlite_rig(memory: AsyncMemory, clock: ManualClock, path: Path) -> Rig:
    async def wipe() -> PipelineBackend:
        await rig.backend.close()
        path.unlink()
        for suffix in ("-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        return SqliteBackend(path)

    rig = Rig(memory, clock, SqliteBackend(path), wipe)
    return rig


async def _redis_rig(memory: AsyncMemory, clock: ManualClock) -> Rig:
    backend = RedisBackend(REDIS_URL, prefix=f"test:{uuid.uuid4().hex}:")

    async def wipe() -> PipelineBackend:
        await backend.drop_all()  # every key of the prefix: streams, locks, counters, timers
        return backend

    return Rig(memory, clock, backend, wipe)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def rig(
    request: pytest.FixtureRequest, llm_memory: AsyncMemory, clock: ManualClock, tmp_path: Path
) -> AsyncIterator[Rig]:
    if request.param == "sqlite":
        made = await _sqlite_rig(llm_memory, clock, tmp_path / "pipeline.db")
    else:
        made = await _redis_rig(llm_memory, clock)
    yield made
    if isinstance(made.backend, RedisBackend):
        await made.backend.drop_all()
    await made.backend.close()


async def _take_tokens(backend: PipelineBackend, key: str, count: int) -> None:
    for n in range(count):
        grant = await backend.acquire_lock(key, f"o{n}", ttl_ms=60_000, now=0)
        assert grant is not None
        await backend.release_lock(key, grant.owner)


async def test_the_pipeline_catches_up_after_losing_its_state_and_token_counters(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await _take_tokens(rig.backend, LOCK_KEY, RECORDED_TOKEN - 1)  # a history of grants
    await rig.memory.capture("acme", "s1", _turns(1))
    assert Outcome.COMPLETED in await rig.run_until_settled()
    assert rig.memory.store.newest_fence(LOCK_KEY) == RECORDED_TOKEN  # the newest grant
    assert rig.owed() == 0

    rig.backend = await rig.wipe()  # restarted with nothing: the counters start from 1 again
    for n in range(2, 12):
        await rig.memory.capture("acme", "s1", _turns(n))
    outcomes = await rig.run_until_settled()

    assert rig.owed() == 0, outcomes  # L1 caught up
    assert (await rig.backend.depth()).dead == 0
    assert Outcome.DEAD not in outcomes
    assert rig.memory.store.newest_fence(LOCK_KEY) > RECORDED_TOKEN
    assert await rig.backend.fence_token(LOCK_KEY) == rig.memory.store.newest_fence(LOCK_KEY)


async def test_a_token_granted_again_after_a_restart_is_refused_to_the_second_holder(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await rig.memory.capture("acme", "s1", _turns(1))
    paused = await rig.backend.acquire_lock(LOCK_KEY, "paused", ttl_ms=60_000, now=0)
    assert paused is not None and paused.token == 1
    fence = Fence(LOCK_KEY, paused.token, paused.owner)  # its writes rely on the fence alone
    service = rig.memory.layer_service()
    assert not (await service.run_l1(Run("acme", "by-hand", "s1", fence))).skipped
    assert rig.memory.store.newest_fence(LOCK_KEY) == 1

    rig.backend = await rig.wipe()  # its lock is gone, and the counter grants 1 again
    for n in range(2, 6):
        await rig.memory.capture("acme", "s1", _turns(n))
    outcomes = await rig.run_until_settled()

    assert outcomes[0] is Outcome.POSTPONED, outcomes  # the worker's start under 1: refused
    assert rig.owed() == 0 and Outcome.DEAD not in outcomes
    assert rig.memory.store.newest_fence(LOCK_KEY) == 2 == await rig.backend.fence_token(LOCK_KEY)
    assert rig.memory.layers is not None
    assert rig.memory.evidence is not None
    l1 = [e for e in rig.memory.evidence.executions(SCOPE) if e.lock_key == LOCK_KEY]
    assert [(e.attempt.token, e.attempt.attempt, e.outcome) for e in l1] == [
        (2, 0, Outcome.COMPLETED)  # once, under the next grant, no attempt spent
    ]
    contents = [m.content for m in rig.memory.store.list_memories(SCOPE)]
    assert len(contents) == len(set(contents)) > 0  # no batch settled twice

    with pytest.raises(StaleFencingToken):  # the paused holder wakes up: fenced out
        rig.memory.store.upsert_memories(SCOPE, [memory("late", "late")], fence=fence)
