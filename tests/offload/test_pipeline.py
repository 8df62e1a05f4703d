"""The offload stages as pipeline executors on both backends (SQLite, the local Redis): retries,
dead letters and requeues lose nothing; offload-l2 writes under its lock's fencing token."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Scope
from stratamem.llm import LLMClient
from stratamem.offload import Offload, ToolPair
from stratamem.offload.executors import PipelineScheduler, register_executors
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2, OFFLOAD_L2_TIMER, OFFLOAD_L15
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.runner import load_registry
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Delivery
from stratamem.pipeline.worker import Outcome, Worker
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.opening import RecordStore
from stratamem.testing import Reply, ScriptedLLM

from . import model

T, S = "acme", "sess-1"


async def never(_seconds: float) -> None:
    """The worker's keeper waits here; executors finish first, then it is cancelled."""
    await asyncio.Event().wait()


@dataclass
class Pipe:
    offload: Offload
    worker: Worker
    backend: PipelineBackend
    store: SqlOffloadStore
    clock: ManualClock
    handled: list[Delivery] = field(default_factory=list)

    async def step(self) -> Outcome | None:
        """Fire due timers, then handle one ready task (None when the queue is empty)."""
        await self.worker.pump_once()
        now = self.clock.now()
        got = await self.backend.consume("test", count=1, block_ms=0, now=now)
        self.handled += got
        return await self.worker.handle(got[0]) if got else None

    def entries(self) -> int:
        return len(self.store.list_entries(Scope(T), S))


REDIS_URL = "redis://127.0.0.1:6379/0"


def open_backend(kind: str, tmp_path: Path) -> PipelineBackend:
    if kind == "sqlite":
        return SqliteBackend(tmp_path / "pipeline.db")
    return RedisBackend(REDIS_URL, prefix=f"test-offload:{uuid.uuid4().hex}:")


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def pipe(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite_store: RecordStore,
    llm: LLMClient,
    clock: ManualClock,
) -> AsyncIterator[Pipe]:
    backend = open_backend(request.param, tmp_path)
    store = SqlOffloadStore(sqlite_store)
    offload = Offload(store, PipelineScheduler(backend, clock), llm=llm, clock=clock)
    registry = ExecutorRegistry()
    register_executors(registry, offload)
    settings = PipelineSettings(retry_limit=1)
    worker = Worker(backend, registry, settings, clock=clock, name="w", sleep=never)
    yield Pipe(offload, worker, backend, store, clock)
    if isinstance(backend, RedisBackend):
        await backend.drop_all()
    await backend.close()


def batch(t0: float, count: int = 8) -> list[ToolPair]:
    return [ToolPair(f"c{i}", "grep", {}, f"hit {i}\n" * 40, t0 + i) for i in range(count)]


async def test_a_failed_summary_call_is_retried_and_loses_nothing(
    pipe: Pipe, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.push_for("offload-l1", Reply.error(400, "bad request"))
    scripted_llm.on("offload-l1", model.summaries)
    assert (await pipe.offload.ingest(T, S, batch(pipe.clock.now()))).enqueued
    assert await pipe.step() is Outcome.RETRIED
    assert pipe.entries() == 0
    assert await pipe.step() is None  # the retry waits for its backoff
    pipe.clock.advance(5)
    assert await pipe.step() is Outcome.COMPLETED
    assert pipe.entries() == 8


async def test_a_dead_lettered_task_is_requeued_and_loses_nothing(
    pipe: Pipe, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.push_for("offload-l1", Reply.error(400), Reply.error(422))
    scripted_llm.on("offload-l1", model.summaries)
    await pipe.offload.ingest(T, S, batch(pipe.clock.now()))
    assert await pipe.step() is Outcome.RETRIED
    pipe.clock.advance(5)
    assert await pipe.step() is Outcome.DEAD
    [dead] = await pipe.backend.list_dead(limit=10)
    assert dead.task.type is OFFLOAD_L1 and "422" in dead.error
    assert pipe.entries() == 0  # the pairs wait in the store, unclaimed
    await pipe.backend.requeue_dead(dead.id, now=pipe.clock.now())
    assert await pipe.step() is Outcome.COMPLETED
    assert pipe.entries() == 8


async def test_the_whole_flow_on_the_pipeline_with_a_fenced_diagram(
    pipe: Pipe, scripted_llm: ScriptedLLM, sqlite_store: RecordStore
) -> None:
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l2", model.diagram)
    scripted_llm.push_for("offload-l15", model.judgment("Find the bug"))
    t0 = pipe.clock.now()
    await pipe.offload.user_message(T, S, "Find the bug", timestamp=t0)
    await pipe.offload.ingest(T, S, batch(t0 + 1))
    outcomes = [await pipe.step(), await pipe.step()]
    assert outcomes == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert (await pipe.backend.get_timer(OFFLOAD_L2_TIMER.key(T, S))) is not None
    pipe.clock.advance(1)
    assert await pipe.step() is Outcome.COMPLETED  # offload-l2, fired by its timer
    [diagram] = (await pipe.offload.diagrams(T, S)).diagrams
    assert diagram.version == 1 and all(e.node_id for e in await pipe.offload.entries(T, S))
    key = f"diagram/{T}/{S}"
    assert sqlite_store.newest_fence(key) == await pipe.backend.fence_token(key) > 0
    kinds = []
    for delivery in pipe.handled:  # each stage wrote its receipt, bound to its attempt
        receipt = pipe.store.receipt(Scope(T), delivery.task.id)
        assert receipt is not None and receipt.authentic and receipt.attempt is not None
        assert (receipt.attempt.worker, receipt.attempt.delivery) == ("w", delivery.deliveries)
        kinds.append(receipt.kind)
    assert sorted(kinds) == ["offload-l1", "offload-l15", "offload-l2"]
    assert receipt.attempt.token == await pipe.backend.fence_token(key)  # offload-l2's


def test_the_worker_factory_registers_the_offload_executors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_DATA_DIR", str(tmp_path))
    for name in ("STRATAMEM_LLM_BASE_URL", "STRATAMEM_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    registry = load_registry("stratamem.runtime:offload_registry")
    assert {OFFLOAD_L1, OFFLOAD_L15, OFFLOAD_L2} <= set(
        registry.types()
    )
    assert (tmp_path / "stratamem.db").exists()


async def test_purged_dead_letters_lose_nothing_either(
    pipe: Pipe, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.push_for("offload-l1", Reply.error(400), Reply.error(400))
    scripted_llm.push_for("offload-l15", Reply.error(400), Reply.error(400))
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l15", lambda request: model.judgment("Search"))
    mark = await pipe.offload.user_message(T, S, "Search the logs", timestamp=pipe.clock.now())
    await pipe.offload.ingest(T, S, batch(pipe.clock.now() + 1))
    outcomes = [await pipe.step(), await pipe.step()]
    pipe.clock.advance(5)
    outcomes += [await pipe.step(), await pipe.step()]
    assert outcomes.count(Outcome.DEAD) == 2
    assert await pipe.backend.purge_dead() == 2

    again = await pipe.offload.resubmit(T, S)
    assert again.pending_pairs == 8 and again.unjudged == (mark,)
    while await pipe.step() is not None:
        pass
    assert pipe.entries() == 8
    assert pipe.store.get_mark(Scope(T), S, mark).judged
    assert (await pipe.offload.resubmit(T, S)).pending_pairs == 0


async def test_stuck_work_is_parked_while_dead_lettered_then_submitted_again_once_purged(
    pipe: Pipe, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.push_for("offload-l1", Reply.error(400), Reply.error(400))
    scripted_llm.push_for("offload-l15", Reply.error(400), Reply.error(400))
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l15", lambda request: model.judgment("Search"))
    settings = PipelineSettings(scheduler_park_refresh_s=0)
    scheduler = BacklogScheduler(pipe.backend, pipe.worker.executors.backlog_sources(60.0),
                                 settings)  # fmt: skip
    await pipe.offload.user_message(T, S, "Search the logs", timestamp=pipe.clock.now())
    await pipe.offload.ingest(T, S, batch(pipe.clock.now() + 1))
    assert (await scheduler.run_pass(pipe.clock.now())).submitted == []  # within the grace
    outcomes = [await pipe.step(), await pipe.step()]
    pipe.clock.advance(5)
    outcomes += [await pipe.step(), await pipe.step()]
    assert outcomes.count(Outcome.DEAD) == 2  # the work is stuck: nothing will run it again
    pipe.clock.advance(600)

    assert (await scheduler.run_pass(pipe.clock.now())).submitted == []  # parked
    assert scheduler.snapshot()["parked"] == 2
    await pipe.backend.purge_dead()
    submitted = (await scheduler.run_pass(pipe.clock.now())).submitted
    assert sorted(t.type for t in submitted) == [OFFLOAD_L1, OFFLOAD_L15]
    while await pipe.step() is not None:
        pass
    assert pipe.entries() == 8
    pipe.clock.advance(3600)
    again = {t.type for t in (await scheduler.run_pass(pipe.clock.now())).submitted}
    assert again.isdisjoint({OFFLOAD_L1, OFFLOAD_L15})  # nothing waits


async def test_entries_left_by_a_skipped_diagram_task_are_mapped_later(
    pipe: Pipe, scripted_llm: ScriptedLLM
) -> None:
    """An offload-l2 that meets its diagram lock busy is skipped at once; its timer had fired,
    so the entries it was to map waited forever. The backlog scheduler finds them unmapped."""
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l2", model.diagram)
    scripted_llm.push_for("offload-l15", model.judgment("Find the bug"))
    t0 = pipe.clock.now()
    await pipe.offload.user_message(T, S, "Find the bug", timestamp=t0)
    await pipe.offload.ingest(T, S, batch(t0 + 1))
    assert [await pipe.step(), await pipe.step()] == [Outcome.COMPLETED] * 2
    key, now = f"diagram/{T}/{S}", pipe.clock.now()
    assert await pipe.backend.acquire_lock(key, "other", ttl_ms=10**6, now=now)
    pipe.clock.advance(1)
    assert await pipe.step() is Outcome.SKIPPED  # offload-l2, fired by its timer, lock busy
    await pipe.backend.release_lock(key, "other")
    assert await pipe.step() is None  # nothing will map them
    assert not any(e.node_id for e in await pipe.offload.entries(T, S))

    scheduler = BacklogScheduler(pipe.backend, pipe.worker.executors.backlog_sources(60.0),
                                 PipelineSettings())  # fmt: skip
    pipe.clock.advance(60)
    submitted = (await scheduler.run_pass(pipe.clock.now())).submitted
    assert [t.type for t in submitted] == [OFFLOAD_L2]
    assert await pipe.step() is Outcome.COMPLETED
    assert all(e.node_id for e in await pipe.offload.entries(T, S))
