"""Open a backend from settings and run a worker process until SIGTERM / SIGINT."""

from __future__ import annotations

import asyncio
import importlib
import signal
from pathlib import Path

from stratamem.clock import SystemClock
from stratamem.errors import ConfigError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.worker import Worker

SQLITE_FILE = "pipeline.db"


def open_backend(settings: PipelineSettings, data_dir: Path) -> PipelineBackend:
    """The configured backend: `<data_dir>/pipeline.db` for SQLite, `redis_url` for Redis."""
    if settings.backend == "redis":
        from stratamem.pipeline.redis_backend import RedisBackend  # noqa: PLC0415 - optional dep

        return RedisBackend(settings.redis_url, prefix=settings.redis_prefix)
    from stratamem.pipeline.sqlite_backend import SqliteBackend  # noqa: PLC0415

    return SqliteBackend(data_dir / SQLITE_FILE)


def load_registry(spec: str) -> ExecutorRegistry:
    """Import `module:factory` and call it for the executor registry."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"executors {spec!r}: expected 'module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"executors {spec!r} cannot be loaded: {exc}") from exc
    registry = factory()
    if not isinstance(registry, ExecutorRegistry):
        raise ConfigError(f"executors {spec!r} did not return an ExecutorRegistry")
    return registry


async def serve(
    settings: PipelineSettings, data_dir: Path, registry: ExecutorRegistry, name: str | None
) -> Worker:
    """Run one worker until SIGTERM / SIGINT, then stop gracefully; returns it (for metrics).

    Beside it runs the backlog scheduler over the registry's sources (active in one process
    of the deployment at a time: see `pipeline.scheduler`)."""
    backend, clock = open_backend(settings, data_dir), SystemClock()
    worker = Worker(backend, registry, settings, name=name, clock=clock)
    scheduler = registry.scheduler_loop(backend, settings, clock, worker.name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.request_stop)
    scheduling = None if scheduler is None else asyncio.ensure_future(scheduler.run(stop))
    try:
        await worker.run()
    finally:
        stop.set()
        if scheduling is not None:
            await scheduling
        await backend.close()
    return worker
