"""The backlog scheduler over a real SQLite store and pipeline backend, with an injected clock:
bounded submissions, cursor paging past keys not due, in flight → backoff → due, progress,
parking of dead-lettered keys, surviving store errors, and one active scheduler per lease."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Role, Scope, Turn
from stratamem.layers.backlog import L1Source
from stratamem.layers.settings import LayerSettings
from stratamem.layers.task_types import L1
from stratamem.pipeline.executors import noop_registry
from stratamem.pipeline.scheduler import (
    FOLLOW_UP_SHARE,
    BacklogScheduler,
    PassReport,
    SchedulerLoop,
    next_pass_in_s,
    read_snapshot,
)
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.pipeline.worker import Worker
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.layers.port import L1Commit
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.sqlite import SqliteStore

NOW = 1_000_000.0
LAYERS = LayerSettings(l1_every_turns=8, idle_timeout_s=300)


@dataclass
class Rig:
    store: SqliteStore
    layers: SqlLayerStore
    backend: SqliteBackend
    clock: ManualClock

    def scheduler(self, **options: object) -> BacklogScheduler:
        settings = PipelineSettings.model_validate({"scheduler_limit": 4, **options})
        source = L1Source(SqlBacklogStore(self.store), LAYERS)
        return BacklogScheduler(self.backend, [source], settings)

    def add(self, session: str, count: int = 1, at: float = 10.0, tenant: str = "t") -> None:
        first = self.layers.session_state(Scope(tenant), session).last_seq
        self.store.add_turns(Scope(tenant), [
            Turn(f"{session}-{first + i}", tenant, session, Role.USER, "hello", at + i)
            for i in range(count)])  # fmt: skip

    async def drain(self) -> list[Task]:
        got = await self.backend.consume("c", count=1000, block_ms=0, now=self.clock.now())
        for delivery in got:
            await self.backend.ack(delivery)
        return [d.task for d in got]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = SqliteStore(tmp_path / "db.sqlite")
    backend = SqliteBackend(tmp_path / "pipeline.db")
    yield Rig(store, SqlLayerStore(store), backend, ManualClock(NOW))
    await backend.close()
    store.close()


def sessions(tasks: list[Task]) -> list[str]:
    return sorted(t.session or "" for t in tasks)


async def test_submissions_are_bounded_by_free_concurrency(rig: Rig) -> None:
    for i in range(10):
        rig.add(f"s{i:02}")
    scheduler = rig.scheduler()
    first = await scheduler.run_pass(NOW)
    assert sessions(first.submitted) == ["s00", "s01", "s02", "s03"]
    assert (await scheduler.run_pass(NOW)).submitted == []  # the queue is full
    assert len(await rig.drain()) == 4  # consumed, but nothing progressed: still in flight
    second = await scheduler.run_pass(NOW)
    assert sessions(second.submitted) == ["s04", "s05", "s06", "s07"]
    await rig.drain()
    assert sessions((await scheduler.run_pass(NOW)).submitted) == ["s08", "s09"]
    assert scheduler.snapshot()["backlog"] == {"L1": 10}
    assert scheduler.snapshot()["in_flight"] == 10


async def test_keys_not_due_never_block_one_that_is(rig: Rig) -> None:
    for i in range(100):  # after a first run, 1 new turn is not enough: due in 300 s
        rig.add(f"a{i:03}", at=NOW - 10)
        rig.layers.commit_l1(Scope("t"), L1Commit(f"a{i:03}", f"x{i}", 0, 1, NOW - 5))
        rig.add(f"a{i:03}", at=NOW - 1)
    rig.add("zz", count=3, at=NOW - 1)  # first run: 1 turn is enough
    report = await rig.scheduler(scheduler_limit=1).run_pass(NOW)
    assert sessions(report.submitted) == ["zz"]


async def test_in_flight_then_backing_off_then_due_and_progress_resets(rig: Rig) -> None:
    rig.add("s1", count=2)
    scheduler = rig.scheduler(scheduler_in_flight_s=600)
    assert sessions((await scheduler.run_pass(NOW)).submitted) == ["s1"]
    await rig.drain()  # the task is lost: the queue forgets it, the turns stay owed
    assert (await scheduler.run_pass(NOW + 599)).submitted == []  # in flight
    assert (await scheduler.run_pass(NOW + 600)).submitted == []  # now backing off 30 s
    assert scheduler.snapshot()["backing_off"] == 1
    assert sessions((await scheduler.run_pass(NOW + 630)).submitted) == ["s1"]
    await rig.drain()
    later = NOW + 630 + 600
    assert (await scheduler.run_pass(later)).submitted == []  # second failure: 60 s
    assert (await scheduler.run_pass(later + 59)).submitted == []
    assert sessions((await scheduler.run_pass(later + 60)).submitted) == ["s1"]
    await rig.drain()
    rig.layers.commit_l1(Scope("t"), L1Commit("s1", "run", 0, 1, later))  # progress
    assert sessions((await scheduler.run_pass(later + 61)).submitted) == ["s1"]


async def test_a_dead_lettered_key_is_parked_until_requeued_or_purged(rig: Rig) -> None:
    rig.add("s1")
    rig.add("s2")
    await rig.backend.enqueue(Task(L1, "t", "s1"), now=NOW)
    [delivery] = await rig.backend.consume("c", count=1, block_ms=0, now=NOW)
    await rig.backend.dead_letter(delivery, "boom", now=NOW)
    scheduler = rig.scheduler(scheduler_park_refresh_s=30)
    assert sessions((await scheduler.run_pass(NOW)).submitted) == ["s2"]
    assert scheduler.snapshot()["parked"] == 1
    await rig.backend.purge_dead()
    assert (await scheduler.run_pass(NOW + 29)).submitted == []  # not read again yet
    assert sessions((await scheduler.run_pass(NOW + 30)).submitted) == ["s1"]
    assert scheduler.snapshot()["parked"] == 0


async def test_a_store_error_is_counted_and_the_next_pass_runs(rig: Rig) -> None:
    rig.add("s1")
    scheduler = rig.scheduler()
    with rig.store.writing() as conn:
        conn.execute("ALTER TABLE session_heads RENAME TO session_heads_away")
    failed = await scheduler.run_pass(NOW)
    assert (failed.errors, failed.submitted) == (1, [])
    with rig.store.writing() as conn:
        conn.execute("ALTER TABLE session_heads_away RENAME TO session_heads")
    assert sessions((await scheduler.run_pass(NOW + 1)).submitted) == ["s1"]
    assert scheduler.snapshot()["errors"] == 1


async def test_one_active_scheduler_per_lease_taken_over_when_its_holder_dies(rig: Rig) -> None:
    rig.add("s1")
    first = SchedulerLoop(rig.scheduler(scheduler_lease_ms=11_000), rig.clock, "first")
    second = SchedulerLoop(rig.scheduler(scheduler_lease_ms=11_000), rig.clock, "second")
    assert (await first.tick()) is not None and first.active
    assert await second.tick() is None and not second.active
    rig.clock.advance(5)
    assert await first.tick() is not None  # renewed
    rig.clock.advance(9)
    assert await second.tick() is None  # the renewal holds
    rig.clock.advance(11)  # the first stopped renewing (it died)
    report = await second.tick()
    assert report is not None and second.active
    assert await first.tick() is None and not first.active  # it lost the lease
    snapshot = await read_snapshot(rig.backend)
    assert snapshot is not None and snapshot["owner"] == "second"


async def test_a_pass_fills_the_running_workers_consumers(rig: Rig) -> None:
    for i in range(20):
        rig.add(f"s{i:02}")
    settings = PipelineSettings(concurrency=4)
    for name in ("w1", "w2"):
        worker = Worker(rig.backend, noop_registry(), settings, clock=rig.clock, name=name)
        await worker.publish_status()
    scheduler = rig.scheduler()  # scheduler_limit 4, but 8 consumers run
    assert len((await scheduler.run_pass(NOW)).submitted) == 16
    assert scheduler.snapshot()["limit"] == 16


async def test_a_pass_that_spends_its_whole_budget_is_followed_sooner(rig: Rig) -> None:
    """While consumers take tasks faster than a pass an interval hands them out, the passes
    follow each other sooner; a pass that finds the queue full, or owed work exhausted, is not
    full and the interval is back."""
    for i in range(6):
        rig.add(f"s{i:02}")
    scheduler = rig.scheduler()  # scheduler_limit 4
    interval = scheduler.settings.scheduler_interval_s
    waits = []
    for drain in (False, False, True, True):
        report = await scheduler.run_pass(NOW)
        waits.append(next_pass_in_s(report, scheduler.settings) / interval)
        if drain:
            await rig.drain()
    assert waits == [FOLLOW_UP_SHARE, 1.0, 1.0, 1.0]  # 4 of 4; none twice (queue full); 2 of 4
    assert next_pass_in_s(None, scheduler.settings) == interval  # not the active scheduler


async def test_an_early_pass_looks_again_only_at_kinds_that_had_work_due(rig: Rig) -> None:
    """The loop's passes come as consumers free up, many a second: one of them looks at a
    kind that submitted at its last look (more may be due), but a kind that had nothing due
    only once an interval has passed since that look. A pass that is not early looks at
    every kind."""
    loop = SchedulerLoop(rig.scheduler(), rig.clock, "early")
    interval = loop.settings.scheduler_interval_s
    assert (await loop.tick(early=True) or PassReport()).submitted == []  # nothing owed
    rig.add("s1")
    rig.clock.advance(interval / 2)
    assert (await loop.tick(early=True) or PassReport()).submitted == []  # not looked at
    rig.clock.advance(interval / 2)
    assert sessions((await loop.tick(early=True) or PassReport()).submitted) == ["s1"]
    rig.add("s2")
    assert sessions((await loop.tick(early=True) or PassReport()).submitted) == ["s2"]
    assert (await loop.tick(early=True) or PassReport()).submitted == []  # both in flight
    rig.add("s3")
    assert (await loop.tick(early=True) or PassReport()).submitted == []
    assert sessions((await loop.tick() or PassReport()).submitted) == ["s3"]


async def test_an_idle_scheduler_rewrites_its_snapshot_once_a_renewal_not_every_pass(
    rig: Rig,
) -> None:
    """Nothing owed: the snapshot says the same pass after pass, so it is written again only
    when a lease renewal's time (a third of the lease) has passed; an idle serve wrote every
    kind's part every second. A change is written at the next pass."""
    loop = SchedulerLoop(rig.scheduler(scheduler_lease_ms=15_000), rig.clock, "idle")
    await loop.tick()
    first = await read_snapshot(rig.backend)
    assert first is not None
    for _ in range(4):  # 4 s: within the 5 s refresh
        rig.clock.advance(1)
        await loop.tick()
    assert (await read_snapshot(rig.backend) or {})["updated_at"] == first["updated_at"]
    rig.clock.advance(1.5)
    await loop.tick()
    assert (await read_snapshot(rig.backend) or {})["updated_at"] == rig.clock.now()
    rig.add("s1")  # owed work: the counters change, the part is written at once
    rig.clock.advance(1)
    await loop.tick()
    changed = await read_snapshot(rig.backend) or {}
    assert changed["updated_at"] == rig.clock.now() and changed["submitted"] == 1
