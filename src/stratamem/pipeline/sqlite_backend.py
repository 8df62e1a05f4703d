"""The embedded backend: SQLite tables in WAL mode, safe with several worker processes on one host.

Every write is one short `BEGIN IMMEDIATE` transaction. A consumed task is leased, not deleted:
its row records the consumer, the lease time and a random lease token (part of the receipt), so an
acknowledgement by a consumer whose lease was reclaimed changes nothing, and a killed process
loses nothing (its leases go idle and are reclaimed).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import deque
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

from stratamem.pipeline.backend import Types
from stratamem.pipeline.errors import BackendUnavailable, DeliveryLost
from stratamem.pipeline.sqlite_core import BUSY_TIMEOUT_MS, SqliteCore, is_busy, translated
from stratamem.pipeline.task import (
    DeadLetter,
    Delivery,
    InFlight,
    LockGrant,
    QueueDepth,
    Task,
)
from stratamem.pipeline.task_type import TaskType
from stratamem.store.evidence.receipts import Attempt

P = ParamSpec("P")
R = TypeVar("R")

POLL_INTERVAL_S = 0.002
POLL_IDLE_MAX_S = 0.1
"""Waiting consumers poll the file every `POLL_INTERVAL_S` after work was seen, doubling up to
`POLL_IDLE_MAX_S` while there is none (an idle process reads it 10 times a second, not 500); an
enqueue of this process wakes a waiter at once, and work seen brings the short interval back."""
WAKE_POLL_S = 0.01
WAKE_POLL_MAX_S = 0.1
"""A `wait_free` reads the wake counters (other processes' notices) every `WAKE_POLL_S` at
first, doubling up to `WAKE_POLL_MAX_S` while none comes; this process's notices end it at
once."""


class SqliteBackend:
    """`PipelineBackend` on a SQLite file (usually `<data_dir>/pipeline.db`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._core = translated(SqliteCore)(path)
        # Consumers waiting for work park on futures; one of them polls the file (other
        # processes enqueue too, and SQLite cannot notify). An enqueue from this process wakes
        # exactly one waiter; the poller seeing work wakes them all.
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._polling = False
        self._poll_s = POLL_INTERVAL_S
        # The task types each waiting consumer runs (None: all); the poller looks for any.
        self._wanted: dict[asyncio.Future[None], list[TaskType] | None] = {}
        # Wake-ups: notices given before this backend was opened are not news; a notice of
        # this process ends its waits at once, another process's at the next poll.
        self._seen_wakes = self._core.wake_counters()
        self._wake_waiters: set[asyncio.Future[None]] = set()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _wait_for_work(self, deadline: float, types: list[TaskType] | None) -> None:
        """Return when a task may be ready (or at `deadline`)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        self._wanted[waiter] = types
        try:
            if self._polling:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, max(0.0, deadline - loop.time()))
                return
            await self._poll(waiter, deadline)
        finally:
            self._wanted.pop(waiter, None)
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wanted_types(self) -> list[TaskType] | None:
        """Every type a waiting consumer runs (None when one of them runs all)."""
        union: set[TaskType] = set()
        for types in self._wanted.values():
            if types is None:
                return None
            union.update(types)
        return sorted(union)

    async def _poll(self, waiter: asyncio.Future[None], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self._polling = True
        try:
            while loop.time() < deadline and not waiter.done():
                if await self._call(self._core.has_ready, self._wanted_types()):
                    self._poll_s = POLL_INTERVAL_S
                    self._wake_all()
                    return
                pause = min(self._poll_s, max(0.0, deadline - loop.time()))
                with contextlib.suppress(TimeoutError):  # a local enqueue ends it at once
                    await asyncio.wait_for(asyncio.shield(waiter), pause)
                self._poll_s = min(2 * self._poll_s, POLL_IDLE_MAX_S)
        finally:
            self._polling = False
        self._wake_one()  # hand the polling over to another waiter

    async def _call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run one short transaction: on the loop if the file is free (tens of microseconds),
        else in a thread that waits for the write lock (another process is writing)."""
        core = self._core
        if core.mutex.acquire(blocking=False):
            try:
                core.set_busy_timeout(0)
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise BackendUnavailable(f"SQLite pipeline store failed: {exc}") from exc
            except sqlite3.Error as exc:
                raise BackendUnavailable(f"SQLite pipeline store failed: {exc}") from exc
            finally:
                core.mutex.release()
        return await asyncio.to_thread(translated(self._waiting), fn, *args, **kwargs)

    def _waiting(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._core.mutex:
            self._core.set_busy_timeout(BUSY_TIMEOUT_MS)
            return fn(*args, **kwargs)

    async def enqueue(self, task: Task, *, now: float) -> None:
        await self._call(self._core.enqueue, task, now)
        self._poll_s = POLL_INTERVAL_S
        self._wake_one()

    async def consume(
        self, consumer: str, *, count: int, block_ms: int, now: float, types: Types = None
    ) -> list[Delivery]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000
        wanted = None if types is None else sorted(types)
        while True:
            got = await self._call(self._core.consume, consumer, count, now, wanted)
            if got:
                self._poll_s = POLL_INTERVAL_S
            if got or loop.time() >= deadline:
                return got
            await self._wait_for_work(deadline, wanted)

    async def ack(self, delivery: Delivery) -> bool:
        return await self._call(self._core.ack, delivery.receipt)

    async def release_and_ack(self, delivery: Delivery, grant: LockGrant | None) -> bool:
        return await self._call(self._core.release_and_ack, delivery.receipt, grant)

    async def release_ack_and_consume(
        self, delivery: Delivery, grant: LockGrant | None, *, consumer: str, now: float,
        types: Types = None, block_ms: int = 0,
    ) -> tuple[bool, list[Delivery]]:
        acked = await self.release_and_ack(delivery, grant)
        got = await self.consume(consumer, count=1, block_ms=block_ms, now=now, types=types)
        return acked, got

    async def extend(self, delivery: Delivery, *, now: float) -> bool:
        return await self._call(self._core.extend, delivery.receipt, now)

    async def stamp(self, delivery: Delivery, attempt: Attempt, *, now: float) -> bool:
        return await self._call(self._core.stamp, delivery.receipt, attempt, now)

    async def in_flight(self, *, limit: int, now: float) -> list[InFlight]:
        return await self._call(self._core.in_flight, limit, now)

    async def reclaim(
        self,
        consumer: str,
        *,
        min_idle_ms: int,
        count: int,
        max_deliveries: int,
        now: float,
        types: Types = None,
    ) -> list[Delivery]:
        wanted = None if types is None else sorted(types)
        return await self._call(
            self._core.reclaim, consumer, min_idle_ms, count, max_deliveries, now, wanted
        )

    async def retry(self, delivery: Delivery, task: Task, *, due_at: float) -> bool:
        return await self._call(self._core.retry, delivery.receipt, task, due_at)

    async def depth(self) -> QueueDepth:
        return await self._call(self._core.depth)

    async def list_tasks(self, *, limit: int) -> list[Task]:
        return await self._call(self._core.list_tasks, limit)

    async def acquire_lock(
        self, key: str, owner: str, *, ttl_ms: int, now: float
    ) -> LockGrant | None:
        return await self._call(self._core.acquire_lock, key, owner, ttl_ms, now)

    async def acquire_for(
        self,
        delivery: Delivery,
        key: str,
        owner: str,
        *,
        ttl_ms: int,
        now: float,
        stamp: Attempt | None = None,
    ) -> LockGrant | None:
        grant = await self._call(self._core.acquire_for, delivery.receipt, (key, owner),
                                 ttl_ms, now, stamp)  # fmt: skip
        if grant is False:
            raise DeliveryLost(f"delivery {delivery.receipt} is no longer {delivery.consumer}'s")
        return grant

    async def renew_lock(self, key: str, owner: str, *, ttl_ms: int, now: float) -> bool:
        return await self._call(self._core.renew_lock, key, owner, ttl_ms, now)

    async def renew_locks(
        self, keys: Sequence[str], owner: str, *, ttl_ms: int, now: float
    ) -> set[str]:
        return await self._call(self._core.renew_locks, list(keys), owner, ttl_ms, now)

    async def release_lock(self, key: str, owner: str) -> bool:
        return await self._call(self._core.release_lock, key, owner)

    async def fence_token(self, key: str) -> int:
        return await self._call(self._core.fence_token, key)

    async def raise_fence(self, key: str, token: int) -> bool:
        return await self._call(self._core.raise_fence, key, token)

    async def set_timer(self, key: str, task: Task, *, due_at: float) -> None:
        await self._call(self._core.set_timer, key, task, due_at)

    async def set_timer_if_earlier(self, key: str, task: Task, *, due_at: float) -> bool:
        return await self._call(self._core.set_timer_if_earlier, key, task, due_at)

    async def remove_timer(self, key: str) -> bool:
        return await self._call(self._core.remove_timer, key)

    async def get_timer(self, key: str) -> tuple[float, Task] | None:
        return await self._call(self._core.get_timer, key)

    async def fire_due_timers(self, *, now: float, limit: int) -> list[Task]:
        return await self._call(self._core.fire_due_timers, now, limit)

    async def state_incr(self, scope: str, field: str, by: int = 1) -> int:
        return await self._call(self._core.state_incr, scope, field, by)

    async def state_set(self, scope: str, field: str, value: str) -> None:
        await self._call(self._core.state_set, scope, field, value)

    async def state_get(self, scope: str) -> dict[str, str]:
        return await self._call(self._core.state_get, scope)

    async def state_delete(self, scope: str, fields: list[str]) -> int:
        return await self._call(self._core.state_delete, scope, fields)

    async def dead_letter(
        self, delivery: Delivery, error: str, *, now: float
    ) -> DeadLetter | None:
        return await self._call(self._core.dead_letter, delivery.receipt, error, now)

    async def list_dead(
        self, *, limit: int, tenant: str | None = None, after: str | None = None
    ) -> list[DeadLetter]:
        return await self._call(self._core.list_dead, limit, tenant, after)

    async def count_dead(self, *, tenant: str | None = None) -> int:
        return await self._call(self._core.count_dead, tenant)

    async def requeue_dead(self, dead_id: str, *, now: float, tenant: str | None = None) -> Task:
        return await self._call(self._core.requeue_dead, dead_id, now, tenant)

    async def purge_dead(self, dead_ids: list[str] | None = None) -> int:
        return await self._call(self._core.purge_dead, dead_ids)

    async def notify_free(self, types: Collection[TaskType]) -> None:
        await self._call(self._core.notify_free, sorted(types))
        for waiter in self._wake_waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_free(self, types: Collection[TaskType], *, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline, wanted = loop.time() + timeout_s, {t.name for t in types}
        pause = WAKE_POLL_S
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            self._wake_waiters.add(waiter)
            try:
                counters = await self._call(self._core.wake_counters)
                seen = self._seen_wakes
                fresh = any(counters.get(t, 0) > seen.get(t, 0) for t in wanted)
                seen.update((t, n) for t, n in counters.items() if t in wanted)
                remaining = deadline - loop.time()
                if fresh or remaining <= 0:
                    return fresh
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, min(pause, remaining))
                pause = min(2 * pause, WAKE_POLL_MAX_S)
            finally:
                self._wake_waiters.discard(waiter)

    async def close(self) -> None:
        await self._call(self._core.conn.close)
