"""A scheduler per kind of work, on both backends: each kind's lease is held by a process that
has its source, so a deployment split by kind schedules every kind; each kind's budget counts
the queued tasks of its own type, so one type that waits never holds back another; a loop wakes
when consumers of its kinds' types are free."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Role, Scope, Turn
from stratamem.layers.backlog import layer_sources
from stratamem.layers.settings import LayerSettings
from stratamem.layers.task_types import L1
from stratamem.offload import Offload
from stratamem.offload.backlog import offload_sources
from stratamem.offload.executors import PipelineScheduler, register_executors
from stratamem.offload.task_types import OFFLOAD_L1
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.scheduler import (
    BacklogScheduler,
    SchedulerLoop,
    Source,
    read_snapshot,
)
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.offload.records import ToolPair
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.sqlite import SqliteStore

NOW = 1_000_000.0
REDIS_URL = "redis://127.0.0.1:6379/0"
LAYERS = LayerSettings(l1_every_turns=1, idle_timeout_s=300)
SETTINGS = PipelineSettings(scheduler_limit=8, scheduler_grace_s=0)
LAYER_KINDS = {"L1", "L2", "L3", "flush", "L2-stale", "L3-stale", "L1-retry"}
OFFLOAD_KINDS = {"offload-l1", "offload-l15", "offload-l2"}


@dataclass
class Rig:
    store: SqliteStore
    backend: PipelineBackend
    clock: ManualClock

    def layers(self) -> list[Source]:
        return layer_sources(SqlBacklogStore(self.store), LAYERS, 0)

    def offload(self) -> list[Source]:
        return offload_sources(SqlOffloadStore(self.store), 0, diagrams=True)

    def loop(self, owner: str, sources: Sequence[Source]) -> SchedulerLoop:
        return SchedulerLoop(BacklogScheduler(self.backend, sources, SETTINGS), self.clock, owner)

    def turn(self, session: str, tenant: str = "t") -> None:
        self.store.add_turns(Scope(tenant), [
            Turn(f"{session}-0", tenant, session, Role.USER, "hello", NOW - 10)])  # fmt: skip

    def tool_call(self, session: str, tenant: str = "t") -> None:
        pair = ToolPair(f"call-{session}", "search", {"q": "x"}, "result", NOW - 10)
        SqlOffloadStore(self.store).append_pairs(Scope(tenant), session, [pair], NOW - 10)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    store = SqliteStore(tmp_path / "db.sqlite")
    if request.param == "sqlite":
        backend: PipelineBackend = SqliteBackend(tmp_path / "pipeline.db")
    else:
        backend = RedisBackend(REDIS_URL, prefix=f"test:{uuid.uuid4().hex}:")
    try:
        yield Rig(store, backend, ManualClock(NOW))
    finally:
        if isinstance(backend, RedisBackend):
            await backend.drop_all()
        await backend.close()
        store.close()


def types(tasks: list[Task]) -> list[str]:
    return sorted(t.type.name for t in tasks)


async def test_an_offload_only_and_a_layers_only_process_each_schedule_their_kinds(
    rig: Rig,
) -> None:
    """The offload-only process starts first: it takes the offload kinds' leases only, and the
    layers-only process started after it still schedules L1 (one lease for the deployment
    left L1 with nobody); when the offload process goes, its kinds wait for a process that has
    them, and the layers process never takes them."""
    rig.turn("s1")
    rig.tool_call("s1")
    offload, layers = rig.loop("offload", rig.offload()), rig.loop("layers", rig.layers())
    first = await offload.tick()
    second = await layers.tick()
    assert first is not None and types(first.submitted) == ["offload-l1"]
    assert second is not None and types(second.submitted) == ["L1"]
    assert (offload.held, layers.held) == (OFFLOAD_KINDS, LAYER_KINDS)
    snapshot = await read_snapshot(rig.backend)
    assert snapshot is not None and snapshot["owners"] == {
        **dict.fromkeys(OFFLOAD_KINDS, "offload"), **dict.fromkeys(LAYER_KINDS, "layers")}
    assert set(snapshot["backlog"]) == OFFLOAD_KINDS | LAYER_KINDS

    await offload.release()  # it stopped
    rig.clock.advance(SETTINGS.scheduler_interval_s)
    assert (await layers.tick()) is not None and layers.held == LAYER_KINDS
    successor = rig.loop("offload-2", rig.offload())
    assert (await successor.tick()) is not None and successor.held == OFFLOAD_KINDS


async def test_a_full_process_and_a_split_one_share_the_kinds(rig: Rig) -> None:
    """A process with every source holds what no other process holds: with a layers-only
    process first, it schedules the offload kinds."""
    layers = rig.loop("layers", rig.layers())
    full = rig.loop("serve", [*rig.layers(), *rig.offload()])
    assert (await layers.tick()) is not None
    assert (await full.tick()) is not None
    assert (layers.held, full.held) == (LAYER_KINDS, OFFLOAD_KINDS)


async def test_eight_waiting_offload_l1_tasks_do_not_block_l1(rig: Rig) -> None:
    """Eight offload-l1 tasks wait (no worker runs them): offload-l1's budget is spent, and L1
    is submitted all the same."""
    for i in range(8):
        await rig.backend.enqueue(Task(OFFLOAD_L1, "t", f"o{i}"), now=NOW)
    rig.turn("s1")
    rig.tool_call("s9")
    loop = rig.loop("serve", [*rig.layers(), *rig.offload()])
    report = await loop.tick()
    assert report is not None and types(report.submitted) == ["L1"]
    budgets = await loop.scheduler.budgets(NOW)
    assert (budgets["offload-l1"], budgets["L1"]) == (0, 7)


async def test_the_loop_wakes_when_consumers_of_its_kinds_are_free(rig: Rig) -> None:
    """Between passes the loop waits for free consumers of its kinds' types (at most the
    interval, 30 s here): a worker's notice for L1 ends the layers loop's wait."""
    layers = rig.loop("layers", rig.layers())
    assert (await layers.tick()) is not None
    stop = asyncio.Event()
    waiting = asyncio.ensure_future(layers._wait(stop, 30.0))
    await rig.backend.notify_free([L1])
    await asyncio.wait_for(waiting, 10)
    stop.set()
    await asyncio.wait_for(layers._wait(stop, 30.0), 10)  # stop ends a wait at once


async def test_offline_the_offload_scan_never_reads_unmapped_entries(rig: Rig) -> None:
    """Offline, no entry is ever mapped to a diagram: there is no offload-l2 source, so a pass
    never pages through the sessions whose entries wait for one (every session that ever had a
    routed tool call: 20,000 of them took 0.5-0.8 s a pass)."""
    registry = ExecutorRegistry()
    scheduler = PipelineScheduler(rig.backend, rig.clock)
    register_executors(registry, Offload(SqlOffloadStore(rig.store), scheduler))  # no LLM
    offline = registry.backlog_sources(0)
    assert {s.kind for s in offline} == {"offload-l1", "offload-l15"}
    loop = rig.loop("offline", offline)
    rig.tool_call("s1")
    report = await loop.tick()
    assert report is not None and types(report.submitted) == ["offload-l1"]
    assert set((await read_snapshot(rig.backend) or {})["backlog"]) == {"offload-l1",
                                                                       "offload-l15"}
