"""The pipeline work `serve` runs beside the API: the scheduler that queues L1 for sessions with
new turns (always), and a worker (consumers, timer pump, reclaim) with the executors of the
memory layers and of context offload (unless `--workers 0`). `worker_registry` gives the same
executors to separate `stratamem worker` processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

from stratamem.api.services import Services
from stratamem.api.settings import ServerSettings
from stratamem.core import AsyncMemory
from stratamem.errors import PipelineError
from stratamem.layers.executors import LayerExecutors, LayerScheduler
from stratamem.offload.executors import register_executors as register_offload
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.runner import open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.worker import Worker

log = logging.getLogger(__name__)
#: How often `serve` resubmits offload sessions whose work waited too long (`Offload.reconcile`).
OFFLOAD_RECONCILE_EVERY_S = 60.0


def service_registry(services: Services) -> ExecutorRegistry:
    """The executors of the memory layers and of context offload over `services`."""
    backend = services.require_pipeline()
    registry = LayerExecutors(services.memory.layer_service(), backend).registry()
    register_offload(registry, services.require_offload())
    return registry


def worker_registry() -> ExecutorRegistry:
    """For `stratamem worker --executors stratamem.api.background:worker_registry`: every task
    type `serve` runs, over the store, LLM and pipeline the `STRATAMEM_*` variables configure.
    The store and clients live as long as the worker process."""
    memory = AsyncMemory.open()
    backend = open_backend(PipelineSettings(), memory.settings.data_dir)
    return service_registry(Services.over(memory, ServerSettings(), backend))


class Background:
    """Started and stopped by the app's lifespan."""

    def __init__(self, services: Services, settings: PipelineSettings, workers: int) -> None:
        backend = services.require_pipeline()
        clock = services.memory.clock
        self.settings = settings.model_copy(update={"concurrency": max(workers, 1)})
        self.consuming = workers > 0
        name = f"serve-{socket.gethostname()}-{os.getpid()}"
        self.worker = Worker(backend, service_registry(services), self.settings, clock=clock,
                             name=name)  # fmt: skip
        self.scheduler = LayerScheduler(services.memory.layer_service(), backend, clock)
        self.offload, self.clock = services.offload, clock
        self._scheduling: asyncio.Task[None] | None = None
        self._working: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._scheduling = loop.create_task(self._schedule())
        if self.consuming:
            self._working = loop.create_task(self.worker.run())

    async def stop(self) -> None:
        """The scheduler stops at once; running tasks get the worker's grace period."""
        if self._scheduling is not None:
            self._scheduling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduling
            self._scheduling = None
        if self._working is not None:
            self.worker.request_stop()
            await self._working
            self._working = None

    async def _schedule(self) -> None:
        next_offload_check = float("-inf")
        while True:
            try:
                await self.scheduler.tick()
                if self.offload is not None and self.clock.now() >= next_offload_check:
                    next_offload_check = self.clock.now() + OFFLOAD_RECONCILE_EVERY_S
                    await self.offload.reconcile()
            except PipelineError:
                log.exception("layer scheduler: backend error")
            await asyncio.sleep(self.settings.pump_interval_s)
