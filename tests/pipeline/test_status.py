"""Worker statuses read back with their liveness: running, stopped, or unresponsive."""

from __future__ import annotations

from stratamem.layers.task_types import L1
from stratamem.pipeline.executors import ExecutorRegistry, noop_registry
from stratamem.pipeline.metrics import RunningTask
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import STALE_MIN_S, WORKERS_SCOPE, stale_after_s, worker_statuses
from stratamem.pipeline.task import Task
from stratamem.pipeline.worker import Worker

from .conftest import Harness


async def test_a_worker_that_stops_publishing_becomes_unresponsive(harness: Harness) -> None:
    settings = PipelineSettings(pump_interval_s=1.0)
    live = Worker(harness.backend, ExecutorRegistry(), settings, clock=harness.clock, name="live")
    gone = Worker(harness.backend, ExecutorRegistry(), settings, clock=harness.clock, name="gone")
    done = Worker(harness.backend, ExecutorRegistry(), settings, clock=harness.clock, name="done")
    t0 = harness.clock.now()
    await gone.publish_status()
    await done.publish_status(stopped=True)
    harness.clock.set(t0 + stale_after_s(settings) + 1)
    await live.publish_status()
    now = harness.clock.now()
    statuses = {s["name"]: s for s in await worker_statuses(harness.backend, now, settings)}
    assert {name: s["state"] for name, s in statuses.items()} == {
        "live": "running", "gone": "unresponsive", "done": "stopped",
    }  # fmt: skip
    assert statuses["live"]["age_s"] == 0
    assert statuses["gone"]["age_s"] == stale_after_s(settings) + 1
    assert "counters" in statuses["gone"]  # its last figures are still shown


def test_staleness_allows_several_pump_intervals() -> None:
    assert stale_after_s(PipelineSettings(pump_interval_s=0.1)) == STALE_MIN_S
    assert stale_after_s(PipelineSettings(pump_interval_s=10)) == 50


async def test_dead_workers_expire_with_their_stale_running_tasks(harness: Harness) -> None:
    settings = PipelineSettings(pump_interval_s=1.0, worker_status_expiry_s=600)
    gone = Worker(harness.backend, ExecutorRegistry(), settings, clock=harness.clock, name="gone")
    done = Worker(harness.backend, ExecutorRegistry(), settings, clock=harness.clock, name="done")
    live = Worker(harness.backend, ExecutorRegistry(), settings, clock=harness.clock, name="live")
    t0 = harness.clock.now()
    task = Task(L1, "t", "s")
    gone.metrics.running[task.id] = RunningTask(task.id, "L1", "t", "s", None, 0, t0)
    await gone.publish_status()  # then killed while running a task
    await done.publish_status(stopped=True)

    harness.clock.set(t0 + 60)
    [_, dead] = await worker_statuses(harness.backend, harness.clock.now(), settings)
    assert dead["state"] == "unresponsive" and dead["running"] == []
    assert [r["task_id"] for r in dead["stale_running"]] == [task.id]

    harness.clock.set(t0 + 601)
    await live.publish_status()
    now = harness.clock.now()
    assert [s["name"] for s in await worker_statuses(harness.backend, now, settings)] == ["live"]
    assert set(await harness.backend.state_get(WORKERS_SCOPE)) == {"live"}  # deleted too


async def test_the_scheduler_keeps_twice_the_running_consumers_queued(harness: Harness) -> None:
    """Owed work reaches L1 only through the backlog scheduler: its limit grows with the
    consumers of the workers running (two tasks each), never below `scheduler_limit`."""
    settings = PipelineSettings(scheduler_limit=8, concurrency=6, pump_interval_s=1.0)
    scheduler = BacklogScheduler(harness.backend, [], settings)
    t0 = harness.clock.now()
    assert (await scheduler.limits(t0))[L1] == 8  # no worker has published
    for name in ("a", "b", "c"):
        worker = Worker(harness.backend, noop_registry(), settings, clock=harness.clock,
                        name=name)  # fmt: skip
        await worker.publish_status()
    assert (await scheduler.limits(t0))[L1] == 36
    await harness.backend.enqueue(Task(L1, "t", "s"), now=t0)
    assert (await harness.backend.depth()).queued_of([L1]) == 1
    await worker.publish_status(stopped=True)
    assert (await scheduler.limits(t0))[L1] == 24
    harness.clock.set(t0 + stale_after_s(settings) + 1)  # a and b stopped publishing: dead
    assert (await scheduler.limits(harness.clock.now()))[L1] == 8
    off = BacklogScheduler(harness.backend, [], settings.model_copy(update={"scheduler_limit": 0}))
    assert set((await off.limits(harness.clock.now())).values()) == {0}
