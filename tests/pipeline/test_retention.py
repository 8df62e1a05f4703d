"""Retention of the execution log and receipts (`pipeline.retention`) on every pipeline backend
(a SQLite file, the local Redis) and every store (a SQLite file, PostgreSQL), with an injected
clock: rows past the retention go unless their task is still queued, in flight, waiting for a
retry or dead (every kind of hold, over every kind of row); a backlog is worked off in bounded
passes; a delivery in flight still finds its receipt and is judged complete after a prune; the
scheduler's loop runs the pass on its interval and publishes the counts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Scope
from stratamem.errors import ConfigError
from stratamem.layers.task_types import L1
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.reconcile import Finding, reconcile
from stratamem.pipeline.retention import LogPruner
from stratamem.pipeline.scheduler import (
    RETENTION,
    backlog_loop,
    lease_key,
    read_snapshot,
    snapshot_gauges,
)
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import DeadLetter, Task
from stratamem.store.evidence.executions import ExecutionStart
from stratamem.store.evidence.receipts import Attempt, Receipt, ReceiptDraft
from stratamem.store.evidence.retention import LogPage, ThreadedRetainedLog
from stratamem.store.evidence.store import SqlEvidenceStore
from stratamem.store.sqlite import SqliteStore
from tests.stores import StoreFactory

from .conftest import Harness
from .test_fencing_and_cli import run_cli

SCOPE = Scope("acme")
HOUR = 3600.0
SETTINGS = PipelineSettings(log_retention_s=HOUR, log_prune_interval_s=60)


@pytest.fixture
def log(open_store: StoreFactory) -> SqlEvidenceStore:
    return SqlEvidenceStore(open_store())


def _commit(log: SqlEvidenceStore, clock: ManualClock, task: Task, worker: str = "w0") -> Attempt:
    """An execution of `task` that committed its receipt and a part's receipt, then ended."""
    start = ExecutionStart(task.id, task.type.name, task.session, None, task.attempt, 1, None,
                           worker)  # fmt: skip
    attempt = log.start_execution(SCOPE, start, clock)
    log.record_receipt(SCOPE, ReceiptDraft(f"{task.id}.0", "L1", clock.now()), None)
    draft = ReceiptDraft(task.id, task.type.name, clock.now(), {"changed": True}, attempt=attempt)
    log.record_receipt(SCOPE, draft, None)
    log.end_execution(SCOPE, attempt, "completed", clock)
    return attempt


def _kept(log: SqlEvidenceStore, task: Task) -> tuple[int, bool, bool]:
    """How many executions of `task` are left, and whether its receipts are."""
    part = log.receipt(SCOPE, f"{task.id}.0") is not None
    return len(log.executions(SCOPE, task.id)), log.receipt(SCOPE, task.id) is not None, part


def _task() -> Task:
    return Task(L1, SCOPE.tenant, "s1")


async def test_only_rows_of_tasks_nothing_holds_go(harness: Harness, log: SqlEvidenceStore) -> None:
    backend, clock = harness.backend, harness.clock
    queued, in_flight, retrying, dead, done, fresh = (_task() for _ in range(6))
    for task in (queued, in_flight, retrying, dead, done):
        _commit(log, clock, task)
    for task in (retrying, in_flight, dead):
        await backend.enqueue(task, now=clock.now())
    taken = {d.task.id: d for d in await backend.consume("w0", count=10, block_ms=0,
                                                         now=clock.now())}  # fmt: skip
    await backend.retry(taken[retrying.id], retrying.next_attempt(), due_at=clock.now() + 9 * HOUR)
    assert await backend.dead_letter(taken[dead.id], "boom", now=clock.now()) is not None
    await backend.enqueue(queued, now=clock.now())
    open_start = ExecutionStart("killed", "offload-l1", "s1", None, 0, 1, None, "w9")
    log.start_execution(SCOPE, open_start, clock)  # its worker was killed: open for good
    clock.advance(2 * HOUR)
    _commit(log, clock, fresh)

    pruner = LogPruner(backend, ThreadedRetainedLog(log), SETTINGS)
    report = await pruner.run(clock.now())

    assert report.deleted == {"executions": 1, "receipts": 2}  # done's execution and receipts
    assert _kept(log, done) == (0, False, False)
    for task in (queued, in_flight, retrying, dead, fresh):
        assert _kept(log, task) == (1, True, True), task
    assert len(log.executions(SCOPE, "killed")) == 1
    assert report.held == 4 + 2 * 4  # per held task: its execution, receipt and part's receipt

    await backend.purge_dead()  # the dead letter is gone: nobody can requeue it any more
    clock.advance(SETTINGS.log_prune_interval_s)
    assert (await pruner.run(clock.now())).deleted == {"executions": 1, "receipts": 2}
    assert _kept(log, dead) == (0, False, False)
    assert pruner.counters.executions == 2 and pruner.counters.receipts == 4


class HookedLog(ThreadedRetainedLog):
    """The store's retained log, running `hook` once after its first page is read."""

    def __init__(self, log: SqlEvidenceStore, hook: Callable[[], Awaitable[None]]) -> None:
        super().__init__(log)
        self.hook: Callable[[], Awaitable[None]] | None = hook

    async def page(self, *args: Any) -> LogPage:
        found = await super().page(*args)
        await _once(self)
        return found


class HookedBackend:
    """The backend under test, running `hook` once after the first `read` (`list_tasks`,
    `list_dead`) returns: a move of the pipeline made at that point of a pass."""

    def __init__(self, backend: PipelineBackend, read: str, hook: Callable[[], Awaitable[None]]):
        self.backend, self.read, self.hook = backend, read, hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    async def list_tasks(self, **kwargs: Any) -> list[Task]:
        found = await self.backend.list_tasks(**kwargs)
        if self.read == "list_tasks":
            await _once(self)
        return found

    async def list_dead(self, **kwargs: Any) -> list[DeadLetter]:
        found = await self.backend.list_dead(**kwargs)
        if self.read == "list_dead":
            await _once(self)
        return found


async def _once(hooked: HookedLog | HookedBackend) -> None:
    hook, hooked.hook = hooked.hook, None
    if hook is not None:
        await hook()


@pytest.mark.parametrize(
    ("move", "at"),
    [("fire", "page"), ("fire", "list_tasks"), ("requeue", "page"), ("requeue", "list_dead")],
)
async def test_a_task_that_moves_during_a_pass_keeps_its_rows(
    harness: Harness, log: SqlEvidenceStore, move: str, at: str
) -> None:
    """The pass is at `at` (its first page read, or its first read of the queue or of the
    dead letters) when the task moves back into the queue: its retry timer fires, or an
    operator requeues it from the dead letters. Its receipt is what replays it, so it stays;
    a task nothing holds, in the same batch, goes."""
    backend, clock = harness.backend, harness.clock
    moving, done = _task(), _task()
    for task in (moving, done):
        _commit(log, clock, task)
    await backend.enqueue(moving, now=clock.now())
    (delivery,) = await backend.consume("w0", count=1, block_ms=0, now=clock.now())
    if move == "fire":
        await backend.retry(delivery, moving.next_attempt(), due_at=clock.now() + HOUR)
    else:
        assert await backend.dead_letter(delivery, "boom", now=clock.now()) is not None
    clock.advance(2 * HOUR)

    async def moves() -> None:
        if move == "fire":
            assert [t.id for t in await backend.fire_due_timers(now=clock.now(), limit=9)] == [
                moving.id
            ]
        else:
            (dead,) = await backend.list_dead(limit=9)
            await backend.requeue_dead(dead.id, now=clock.now())

    retained = HookedLog(log, moves) if at == "page" else ThreadedRetainedLog(log)
    hooked = backend if at == "page" else HookedBackend(backend, at, moves)
    report = await LogPruner(hooked, retained, SETTINGS).run(clock.now())  # type: ignore[arg-type]

    assert [t.id for t in await backend.list_tasks(limit=9)] == [moving.id]  # it did move
    assert _kept(log, moving) == (1, True, True)
    assert _kept(log, done) == (0, False, False)
    assert report.deleted == {"executions": 1, "receipts": 2} and report.held == 3


async def test_a_pass_deletes_retired_keys_no_receipt_left_names(
    harness: Harness, log: SqlEvidenceStore
) -> None:
    """The first key signed a task that is done, the second one still queued: once both were
    retired (past the retention) and the done task's receipts pruned, the first key goes; the
    second stays with the receipt that replays its task, and the active key stays."""
    backend, clock = harness.backend, harness.clock
    done, queued = _task(), _task()
    _commit(log, clock, done)
    log.rotate_receipt_key(clock.now(), retire_old=True)
    _commit(log, clock, queued)
    await backend.enqueue(queued, now=clock.now())
    log.rotate_receipt_key(clock.advance(1), retire_old=True)
    clock.advance(2 * HOUR)
    pruner = LogPruner(backend, ThreadedRetainedLog(log), SETTINGS)

    report = await pruner.run(clock.now())

    assert report.deleted == {"executions": 1, "receipts": 2} and report.keys == 1
    assert pruner.counters.keys == 1
    with log._store.reading() as conn:
        kept = conn.execute("SELECT COUNT(*) FROM receipt_keys").fetchone()[0]
    assert kept == 2  # the queued task's and the active one
    assert _kept(log, queued) == (1, True, True)
    clock.advance(SETTINGS.log_prune_interval_s)
    assert (await pruner.run(clock.now())).keys == 0


async def test_a_delivery_in_flight_still_replays_after_a_prune(
    harness: Harness, log: SqlEvidenceStore
) -> None:
    backend, clock = harness.backend, harness.clock
    task = _task()
    await backend.enqueue(task, now=clock.now())
    (delivery,) = await backend.consume("w0", count=1, block_ms=0, now=clock.now())
    attempt = _commit(log, clock, task)
    assert await backend.stamp(delivery, attempt, now=clock.now())
    clock.advance(30 * 24 * HOUR)  # the worker died after committing; a month goes by
    await LogPruner(backend, ThreadedRetainedLog(log), SETTINGS).run(clock.now())

    async def receipts(tenant: str, task_id: str) -> Receipt | None:
        return log.receipt(Scope(tenant), task_id)

    (report,) = await reconcile(backend, receipts, SETTINGS, now=clock.now())
    assert report.finding is Finding.COMPLETED and report.may_submit_completion


async def test_a_backlog_goes_in_bounded_passes(harness: Harness, log: SqlEvidenceStore) -> None:
    clock = harness.clock
    for i in range(25):
        log.record_receipt(SCOPE, ReceiptDraft(f"r{i:02}", "L1", clock.now()), None)
    clock.advance(2 * HOUR)
    settings = SETTINGS.model_copy(update={"log_prune_batch": 4, "log_prune_batches": 2})
    pruner = LogPruner(harness.backend, ThreadedRetainedLog(log), settings)
    deleted = [(await pruner.run(clock.now())).deleted["receipts"] for _ in range(5)]
    assert deleted == [8, 8, 8, 1, 0]
    assert log.receipt(SCOPE, "r24") is None


async def test_with_more_queued_than_it_reads_a_pass_deletes_nothing(
    harness: Harness, log: SqlEvidenceStore
) -> None:
    clock = harness.clock
    _commit(log, clock, _task())
    for _ in range(3):
        await harness.backend.enqueue(_task(), now=clock.now())
    clock.advance(2 * HOUR)
    settings = SETTINGS.model_copy(update={"log_prune_scan": 2})
    pruner = LogPruner(harness.backend, ThreadedRetainedLog(log), settings)
    report = await pruner.run(clock.now())
    assert not report.decided and report.deleted == {} and pruner.counters.undecided == 1
    assert len(log.executions(SCOPE)) == 1


async def test_the_scheduler_loop_prunes_on_its_interval_and_publishes(
    harness: Harness, log: SqlEvidenceStore
) -> None:
    clock = harness.clock
    retained = ThreadedRetainedLog(log)
    assert backlog_loop(harness.backend, [], SETTINGS, clock, "a") is None  # nothing to do
    off = SETTINGS.model_copy(update={"log_retention_s": 0.0})
    assert backlog_loop(harness.backend, [], off, clock, "a", retained) is None
    hourly = SETTINGS.model_copy(update={"log_prune_interval_s": HOUR})
    loop = backlog_loop(harness.backend, [], hourly, clock, "a", retained)
    assert loop is not None
    first, second = _task(), _task()
    _commit(log, clock, first)
    clock.advance(0.5 * HOUR)
    _commit(log, clock, second)
    clock.advance(0.7 * HOUR)
    await loop.tick()  # the first is past the retention, the second not yet
    assert (_kept(log, first), _kept(log, second)) == ((0, False, False), (1, True, True))
    clock.advance(0.4 * HOUR)
    await loop.tick()  # the second is past it now, but the last pass was too recent
    assert _kept(log, second) == (1, True, True)
    snapshot = await read_snapshot(harness.backend)
    assert snapshot is not None
    assert snapshot["retention"]["passes"] == 1 and snapshot["retention"]["executions"] == 1
    assert snapshot_gauges(snapshot)["retention_receipts"] == 2.0
    clock.advance(0.6 * HOUR)
    await loop.tick()
    assert log.executions(SCOPE) == []


async def test_a_loop_taking_the_lease_over_prunes_on_the_deployments_interval(
    harness: Harness, log: SqlEvidenceStore
) -> None:
    """A one-shot pass (`once`) prunes and lets the lease go; the next holder prunes when the
    interval since that pass is over (from the published snapshot), not as soon as it holds
    the lease."""
    clock, retained = harness.clock, ThreadedRetainedLog(log)
    hourly = SETTINGS.model_copy(update={"log_prune_interval_s": HOUR})
    first, second = _task(), _task()
    _commit(log, clock, first)
    clock.advance(1.5 * HOUR)
    _commit(log, clock, second)
    clock.advance(0.5 * HOUR)
    one_shot = backlog_loop(harness.backend, [], hourly, clock, "once", retained)
    assert one_shot is not None and await one_shot.once() is not None
    assert _kept(log, first) == (0, False, False) and not one_shot.active
    assert _kept(log, second) == (1, True, True)  # not past the retention yet
    clock.advance(0.9 * HOUR)  # it is now; the one-shot pass is 0.9 h old
    taking_over = backlog_loop(harness.backend, [], hourly, clock, "w1", retained)
    assert taking_over is not None
    assert await taking_over.tick() is not None and taking_over.active
    assert _kept(log, second) == (1, True, True)
    clock.advance(0.1 * HOUR)
    await taking_over.tick()
    assert _kept(log, second) == (0, False, False)


def test_schedule_once_prunes_unless_another_process_holds_the_lease(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "stratamem.db")
    old = _task()
    _commit(SqlEvidenceStore(store), ManualClock(), old)  # in 2023: past the default 7 days
    store.close()

    async def lease(owner: str, take: bool) -> bool:
        backend = SqliteBackend(tmp_path / "pipeline.db")
        try:
            if take:
                return await backend.acquire_lock(lease_key(RETENTION), owner, ttl_ms=3_600_000,
                                                  now=time.time()) is not None  # fmt: skip
            return await backend.release_lock(lease_key(RETENTION), owner)
        finally:
            await backend.close()

    def kept() -> tuple[int, bool, bool]:
        store = SqliteStore(tmp_path / "stratamem.db")
        try:
            return _kept(SqlEvidenceStore(store), old)
        finally:
            store.close()

    assert asyncio.run(lease("worker-1", take=True))
    out = run_cli(tmp_path, "--embedder", "none", "schedule", "--once")
    assert "another process holds the scheduler's lease" in out and kept() == (1, True, True)
    assert asyncio.run(lease("worker-1", take=False))
    assert run_cli(tmp_path, "--embedder", "none", "schedule", "--once") == ""
    assert kept() == (0, False, False)
    status = json.loads(run_cli(tmp_path, "pipeline", "status", "--json"))
    assert status["scheduler"]["retention"]["executions"] == 1
    assert asyncio.run(lease("worker-1", take=True))  # the one-shot let the lease go


def test_retention_is_off_or_at_least_an_hour() -> None:
    assert PipelineSettings(log_retention_s=0).log_retention_s == 0
    assert PipelineSettings().log_retention_s == 7 * 24 * HOUR
    with pytest.raises(ConfigError, match="log_retention_s"):
        PipelineSettings(log_retention_s=60)


def test_pipeline_status_prints_what_retention_pruned(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    log, clock = SqlEvidenceStore(store), ManualClock()

    async def one_pass() -> None:
        backend = SqliteBackend(tmp_path / "pipeline.db")
        loop = backlog_loop(backend, [], SETTINGS, clock, "w0", ThreadedRetainedLog(log))
        assert loop is not None
        _commit(log, clock, _task())
        clock.advance(2 * HOUR)
        await loop.tick()
        await backend.close()

    asyncio.run(one_pass())
    store.close()
    out = run_cli(tmp_path, "pipeline", "status")
    assert "retention: passes=1 undecided=0 errors=0 executions=1 receipts=2 keys=0 held=0" in out
    status = json.loads(run_cli(tmp_path, "pipeline", "status", "--json"))
    assert status["scheduler"]["retention"]["receipts"] == 2
