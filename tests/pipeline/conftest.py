"""Fixtures: every pipeline backend on a real store (a SQLite file, the local Redis server)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
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
    plant_timer: Callable[[str, float, str], Awaitable[None]]
    """Write a timer row as it is stored (key, due time, body), bypassing the backend."""
    unreadable_timers: Callable[[], Awaitable[list[str]]]
    """The keys of the timers the backend set aside as unreadable."""
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

    async def plant(key: str, due_at: float, body: str) -> None:
        with contextlib.closing(sqlite3.connect(path)) as raw, raw:
            raw.execute("INSERT INTO timers (key, due_at, body) VALUES (?, ?, ?)",
                        (key, due_at, body))  # fmt: skip

    async def aside() -> list[str]:
        with contextlib.closing(sqlite3.connect(path)) as raw:
            rows = raw.execute("SELECT key FROM unreadable_timers ORDER BY key").fetchall()
        return [str(r[0]) for r in rows]

    made = Harness(backend, clock, "sqlite", lapse, peer, plant, aside, [backend.close])
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

    async def plant(key: str, due_at: float, body: str) -> None:
        await raw.zadd(backend.keys.timers, {key: due_at})
        await raw.hset(backend.keys.timer_data, key, body)

    async def aside() -> list[str]:
        return sorted(k.decode() for k in await raw.hkeys(backend.keys.unreadable_timers))

    made = Harness(backend, clock, "redis", lapse, peer, plant, aside,
                   [backend.drop_all, backend.close, raw.aclose])  # fmt: skip
    return made


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    made = _sqlite_harness(tmp_path) if request.param == "sqlite" else _redis_harness()
    try:
        yield made
    finally:
        for close in made.closers:
            await close()
