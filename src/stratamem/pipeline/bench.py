"""Benchmark: no-op tasks through the real worker path, against saq on the same Redis, same run.

Two phases per queue, both with the consumers in this process:
- throughput: N tasks enqueued up front, then W consumers drain them (tasks per second from the
  first start to the last finish; and this process's CPU time a task, enqueueing and consuming,
  from the first enqueue to the last finish: steadier than the rate on a shared machine);
- latency: tasks enqueued one by one at a fixed rate below saturation (a fifth of the measured
  throughput, at most 500/s); enqueue-to-start latency p50 / p99.

Our tasks are of a type with a lock of its own per session (`_session_locked`: offload-l2), on
distinct sessions: each takes a lock (with a fencing token), runs
the no-op executor under the keeper, releases and acks — the worker path without the cascade.
The baseline is saq (Redis lists + pub/sub), a no-op job, concurrency W.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry
from stratamem.pipeline.runner import open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import Scope, TaskType, registered
from stratamem.pipeline.worker import Worker

LATENCY_MAX_RATE_PER_S = 500.0
LATENCY_SHARE_OF_THROUGHPUT = 0.2
LATENCY_TASKS_MAX = 1000


@dataclass
class Recorder:
    """Start latencies (s) and finish times of no-op executions; wakes a waiter at `target`."""

    target: int = 0
    starts: list[float] = field(default_factory=list)
    first_start: float = 0.0
    last_end: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def reset(self, target: int) -> None:
        self.target, self.starts, self.done = target, [], asyncio.Event()

    def started(self, enqueued_at: float) -> None:
        now = time.time()
        if not self.starts:
            self.first_start = now
        self.starts.append(now - enqueued_at)

    def finished(self) -> None:
        self.last_end = time.time()
        if len(self.starts) >= self.target:
            self.done.set()


@dataclass(frozen=True)
class Figures:
    tasks_per_s: float
    p50_start_ms: float
    p99_start_ms: float
    cpu_ms_per_task: float

    def as_dict(self) -> dict[str, float]:
        return {
            "tasks_per_s": round(self.tasks_per_s, 1),
            "cpu_ms_per_task": round(self.cpu_ms_per_task, 3),
            "p50_start_ms": round(self.p50_start_ms, 2),
            "p99_start_ms": round(self.p99_start_ms, 2),
        }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Enqueue = Callable[[float], Awaitable[None]]


async def _measure(
    recorder: Recorder, enqueue: Enqueue, tasks: int, *, timeout_s: float
) -> Figures:
    recorder.reset(tasks)
    cpu_start = time.process_time()
    for _ in range(tasks):
        await enqueue(time.time())
    await asyncio.wait_for(recorder.done.wait(), timeout_s)
    cpu_ms = (time.process_time() - cpu_start) * 1000 / tasks
    tps = tasks / max(recorder.last_end - recorder.first_start, 1e-9)
    rate = min(LATENCY_MAX_RATE_PER_S, tps * LATENCY_SHARE_OF_THROUGHPUT)
    paced = min(LATENCY_TASKS_MAX, max(50, int(rate * 2)))
    recorder.reset(paced)
    start = time.monotonic()
    for i in range(paced):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        await enqueue(time.time())
    await asyncio.wait_for(recorder.done.wait(), timeout_s)
    ms = [s * 1000 for s in recorder.starts]
    return Figures(tps, _percentile(ms, 0.5), _percentile(ms, 0.99), cpu_ms)


# -- ours -------------------------------------------------------------------------------------


def _session_locked() -> TaskType:
    """The first registered type whose tasks each take a lock of their own per session."""
    return next(t for t in registered() if t.scope is Scope.SESSION and t.lock is not None
                and t.lock.per is Scope.SESSION and not t.lock.widens)  # fmt: skip


async def bench_ours(
    kind: str, tasks: int, workers: int, redis_url: str, timeout_s: float
) -> Figures:
    recorder = Recorder()

    async def noop(ctx: ExecutionContext) -> ExecResult:
        recorder.started(ctx.enqueued_at)
        recorder.finished()
        return ExecResult(changed=False)

    settings = PipelineSettings(
        backend="redis" if kind == "redis" else "sqlite",
        redis_url=redis_url,
        redis_prefix=f"bench:{uuid.uuid4().hex}:",
        concurrency=workers,
        consume_block_ms=200,
        pump_interval_s=1,
        reclaim_interval_s=5,
    )
    task_type = _session_locked()
    registry = ExecutorRegistry([(task_type, noop)])
    with tempfile.TemporaryDirectory(prefix="stratamem-bench-") as tmp:
        backend = open_backend(settings, Path(tmp))
        worker = Worker(backend, registry, settings, name="bench")
        running = asyncio.ensure_future(worker.run())

        async def enqueue(now: float) -> None:
            task = Task(task_type, "bench", uuid.uuid4().hex)
            await backend.enqueue(task, now=now)

        try:
            return await _measure(recorder, enqueue, tasks, timeout_s=timeout_s)
        finally:
            worker.request_stop()
            await running
            await _drop(backend)
            await backend.close()


async def _drop(backend: PipelineBackend) -> None:
    drop = getattr(backend, "drop_all", None)
    if drop is not None:
        await drop()


# -- baseline: saq ----------------------------------------------------------------------------


async def bench_saq(tasks: int, workers: int, redis_url: str, timeout_s: float) -> Figures:
    from saq import Queue  # noqa: PLC0415 - optional benchmark dependency
    from saq import Worker as SaqWorker  # noqa: PLC0415

    recorder = Recorder()

    async def noop(ctx: Any, *, enqueued_at: float) -> None:
        recorder.started(enqueued_at)
        recorder.finished()

    queue = Queue.from_url(redis_url, name=f"bench-{uuid.uuid4().hex}")
    worker = SaqWorker(queue, functions=[("noop", noop)], concurrency=workers)
    running = asyncio.ensure_future(worker.start())

    async def enqueue(now: float) -> None:
        await queue.enqueue("noop", enqueued_at=now)

    try:
        return await _measure(recorder, enqueue, tasks, timeout_s=timeout_s)
    finally:
        await worker.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await queue.disconnect()
        await _drop_saq_keys(redis_url, queue.name)


async def _drop_saq_keys(redis_url: str, name: str) -> None:
    import redis.asyncio as aioredis  # noqa: PLC0415

    client = aioredis.Redis.from_url(redis_url)
    try:
        async for key in client.scan_iter(match=f"saq:{name}*", count=500):
            await client.delete(key)
        async for key in client.scan_iter(match=f"*{name}*", count=500):
            await client.delete(key)
    finally:
        await client.aclose()


def _median(runs: list[Figures]) -> Figures:
    return Figures(
        statistics.median(f.tasks_per_s for f in runs),
        statistics.median(f.p50_start_ms for f in runs),
        statistics.median(f.p99_start_ms for f in runs),
        statistics.median(f.cpu_ms_per_task for f in runs),
    )


async def run_bench(
    kind: str,
    tasks: int,
    workers: int,
    redis_url: str,
    *,
    repeat: int = 3,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Alternate ours and saq `repeat` times (shared machines are noisy); report medians."""
    ours: list[Figures] = []
    base: list[Figures] = []
    for _ in range(repeat):
        ours.append(await bench_ours(kind, tasks, workers, redis_url, timeout_s))
        base.append(await bench_saq(tasks, workers, redis_url, timeout_s))
    mine, theirs = _median(ours), _median(base)
    return {
        "backend": kind,
        "tasks": tasks,
        "workers": workers,
        "repeat": repeat,
        **mine.as_dict(),
        "baseline": {"name": "saq", **theirs.as_dict()},
        "ratio": round(mine.tasks_per_s / theirs.tasks_per_s, 2),
        "cpu_ratio": round(theirs.cpu_ms_per_task / max(mine.cpu_ms_per_task, 1e-9), 2),
        "runs": {"ours": [f.as_dict() for f in ours], "saq": [f.as_dict() for f in base]},
    }
