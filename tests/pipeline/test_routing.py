"""Routing: a worker runs only the task types it has executors for; others wait for theirs."""

from __future__ import annotations

import asyncio

from stratamem.layers.task_types import FLUSH, L1, L2, L3
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2, OFFLOAD_L15
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import TaskType
from stratamem.pipeline.worker import Worker

from .conftest import Harness

LAYERS = (L1, L2, L3, FLUSH)
OFFLOAD = (OFFLOAD_L1, OFFLOAD_L15, OFFLOAD_L2)


async def _run_until(worker: Worker, done: asyncio.Event) -> None:
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(done.wait(), timeout=10)
    worker.request_stop()
    await asyncio.wait_for(running, timeout=10)


def _worker(harness: Harness, types: tuple[TaskType, ...], ran: list[Task], done: asyncio.Event,
            name: str) -> Worker:  # fmt: skip
    async def run(ctx: ExecutionContext) -> ExecResult:
        ran.append(ctx.task)
        done.set()
        return ExecResult(changed=False)

    settings = PipelineSettings(consume_block_ms=20, concurrency=2)
    registry = ExecutorRegistry((t, run) for t in types)
    return Worker(harness.backend, registry, settings, clock=harness.clock, name=name)


async def test_a_layers_only_worker_leaves_offload_tasks_to_an_offload_worker(
    harness: Harness,
) -> None:
    b, now = harness.backend, harness.clock.now()
    offload = Task(OFFLOAD_L1, "t", "s")
    layer = Task(L3, "t")
    await b.enqueue(offload, now=now)
    await b.enqueue(layer, now=now)
    ran_layers: list[Task] = []
    done = asyncio.Event()
    layers_worker = _worker(harness, LAYERS, ran_layers, done, "layers")
    await _run_until(layers_worker, done)
    assert ran_layers == [layer]
    assert layers_worker.metrics.consumed == 1 and layers_worker.metrics.dead_lettered == 0
    assert await b.list_tasks(limit=10) == [offload]
    assert (await b.depth()).dead == 0
    ran_offload: list[Task] = []
    done = asyncio.Event()
    await _run_until(_worker(harness, OFFLOAD, ran_offload, done, "offload"), done)
    assert ran_offload == [offload]
    assert (await b.depth()).ready == 0
