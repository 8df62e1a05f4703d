"""Fixtures: every pipeline backend on a real store (a SQLite file, the local Redis server)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from stratamem.clock import ManualClock
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.sqlite_backend import SqliteBackend

REDIS_URL = "redis://127.0.0.1:6379/0"

Closer = Callable[[], Awaitable[None]]


@dataclass
class Harness:
    """A backend under test, its manual clock, and what the backend-neutral tests need."""

    backend: PipelineBackend
    clock: ManualClock
    name: str
    lapse_lock: Callable[[str], Awaitable[None]]
    make_peer: Callable[[], Awaitable[PipelineBackend]]
    closers: list[Closer] = field(default_factory=list)


def _sqlite_harness(tmp_path: Path) -> Harness:
    clock = ManualClock()
    path = tmp_path / "pipeline.db"
    backend = SqliteBackend(path)

    async def lapse(_key: str) -> None:
        clock.advance(3600)

    async def peer() -> PipelineBackend:
        other = SqliteBackend(path)
        made.closers.append(other.close)
        return other

    made = Harness(backend, clock, "sqlite", lapse, peer, [backend.close])
    return made


def _redis_harness() -> Harness:
    prefix = f"test:{uuid.uuid4().hex}:"
    clock = ManualClock()
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    raw = aioredis.Redis.from_url(REDIS_URL)

    async def lapse(key: str) -> None:
        # Redis enforces lock TTLs on its own clock: shorten the TTL to 1 ms, then wait (bounded)
        # for the server to expire it.
        name = backend.keys.lock(key)
        await raw.pexpire(name, 1)
        deadline = time.monotonic() + 2
        while await raw.exists(name) and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    async def peer() -> PipelineBackend:
        other = RedisBackend(REDIS_URL, prefix=prefix)
        made.closers.append(other.close)
        return other

    made = Harness(
        backend, clock, "redis", lapse, peer, [backend.drop_all, backend.close, raw.aclose]
    )
    return made


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    made = _sqlite_harness(tmp_path) if request.param == "sqlite" else _redis_harness()
    try:
        yield made
    finally:
        for close in made.closers:
            await close()
