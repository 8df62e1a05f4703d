"""The pipeline work `serve` runs beside the API: the backlog scheduler (always; active in one
process of the deployment at a time) and a worker (consumers, timer pump, reclaim) with the
executors of the memory layers and of context offload (unless `--workers 0`).
`stratamem.runtime:worker_registry` gives the same executors and backlog sources to separate
`stratamem worker` processes."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from stratamem.api.services import Services
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.worker import Worker
from stratamem.runtime import registry_of

log = logging.getLogger(__name__)


def service_registry(services: Services) -> ExecutorRegistry:
    """The executors and backlog sources of the memory layers and of context offload."""
    return registry_of(services.memory, services.require_pipeline(), services.require_offload())


class Background:
    """Started and stopped by the app's lifespan. `stop_within_s` (serve's shutdown bound)
    caps the worker's grace period: begun with the requests' drain (`begin_stop`), the running
    tasks then end by the same deadline as the requests in flight. With `embedding_poll_s`, the
    memory's embedding catch-up is also woken that often (the one process of
    `serve --processes` that embeds also embeds what the others captured)."""

    def __init__(
        self,
        services: Services,
        settings: PipelineSettings,
        workers: int,
        stop_within_s: float | None = None,
        embedding_poll_s: float | None = None,
    ) -> None:
        backend = services.require_pipeline()
        clock = services.memory.clock
        grace_s = settings.grace_period_s
        if stop_within_s is not None:
            grace_s = min(grace_s, stop_within_s)
        self.settings = settings.model_copy(
            update={"concurrency": max(workers, 1), "grace_period_s": grace_s}
        )
        self.consuming = workers > 0
        name = f"serve-{socket.gethostname()}-{os.getpid()}"
        registry = service_registry(services)
        self.worker = Worker(backend, registry, self.settings, clock=clock, name=name)
        self.scheduler = registry.scheduler_loop(backend, self.settings, clock, name)
        self._services = services
        self._stop = asyncio.Event()
        self._scheduling: asyncio.Task[None] | None = None
        self._working: asyncio.Task[None] | None = None
        self._embedding_poll_s = embedding_poll_s
        self._polling: asyncio.Task[None] | None = None
        self.halted = asyncio.Event()
        """Set when the worker or the scheduler stopped by an error (not asked to stop)."""

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop.clear()
        if self.scheduler is not None:
            self._scheduling = loop.create_task(self.scheduler.run(self._stop))
            self._scheduling.add_done_callback(lambda done: self._ended("scheduler", done))
        if self.consuming:
            self._working = loop.create_task(self.worker.run())
            self._working.add_done_callback(lambda done: self._ended("worker", done))
        if self._embedding_poll_s is not None:
            self._polling = loop.create_task(self._poll_embedding(self._embedding_poll_s))

    async def _poll_embedding(self, every_s: float) -> None:
        while not self._stop.is_set():
            self._services.memory.start_background()
            try:
                await asyncio.wait_for(self._stop.wait(), every_s)
            except TimeoutError:
                continue

    def _ended(self, part: str, done: asyncio.Task[None]) -> None:
        """A part that ends while nobody asked it to (a bug it did not survive) leaves the
        process answering with nothing behind it: say so, and make `/v1/ready` fail."""
        if done.cancelled() or (self._stop.is_set() and done.exception() is None):
            return
        error = done.exception()
        why = f"the pipeline {part} stopped" + ("" if error is None else f": {error!r}")
        self._services.stopped = why
        self.halted.set()
        log.error("%s; /v1/ready answers 503 until this process is restarted", why)

    def begin_stop(self) -> None:
        """No new task from here; the scheduler stops after its pass, and the running tasks'
        grace period starts (it may be called before `stop`, which waits for both)."""
        self._stop.set()
        self.worker.request_stop()

    async def stop(self) -> None:
        """The scheduler stops after its pass; running tasks get the worker's grace period."""
        self.begin_stop()
        if self._polling is not None:
            await self._polling
            self._polling = None
        if self._scheduling is not None:
            await self._scheduling
            self._scheduling = None
        if self._working is not None:
            await self._working
            self._working = None
