"""The pipeline work `serve` runs beside the API: a worker (consumers, timer pump, reclaim) with
the executors of the memory layers and of context offload, and the scheduler that queues L1 for
sessions with new turns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

from stratamem.api.services import Services
from stratamem.errors import PipelineError
from stratamem.layers.executors import LayerExecutors, LayerScheduler
from stratamem.offload.executors import register_executors as register_offload
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.worker import Worker

log = logging.getLogger(__name__)


class Background:
    """Started and stopped by the app's lifespan; `workers` consumers (0: nothing runs)."""

    def __init__(self, services: Services, settings: PipelineSettings, workers: int) -> None:
        backend = services.require_pipeline()
        layers = services.memory.layer_service()
        self.settings = settings.model_copy(update={"concurrency": max(workers, 1)})
        self.enabled = workers > 0
        registry = LayerExecutors(layers, backend).registry()
        register_offload(registry, services.require_offload())
        name = f"serve-{socket.gethostname()}-{os.getpid()}"
        self.worker = Worker(backend, registry, self.settings, clock=services.memory.clock,
                             name=name)  # fmt: skip
        self.scheduler = LayerScheduler(layers, backend, services.memory.clock)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.worker.run()), loop.create_task(self._schedule())]

    async def stop(self) -> None:
        """Stop consuming; running tasks get the grace period; the scheduler stops at once."""
        if not self._tasks:
            return
        worker_task, scheduler_task = self._tasks
        self.worker.request_stop()
        scheduler_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await scheduler_task
        await worker_task
        self._tasks = []

    async def _schedule(self) -> None:
        while True:
            try:
                await self.scheduler.tick()
            except PipelineError:
                log.exception("layer scheduler: backend error")
            await asyncio.sleep(self.settings.pump_interval_s)
