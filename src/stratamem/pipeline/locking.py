"""Holding a worker lock outside a worker: for work done on request (a waited flush) that must
take its turn with the tasks of the same key.

`holding` waits for the lock as a worker does (backoff from `lock_backoff_initial_s`, times
`lock_backoff_factor`, capped, for at most `lock_wait_s`), renews it every quarter TTL while the
body runs, and releases it at the end. Writes made under it carry its fencing token, so if the
renewal fails (a long pause) the store refuses them instead of letting two writers race. A
refusal because the backend's token counter went backwards (it lost its state) raises the
counter and is `FenceResynced`: the same body under a new grant will be accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from stratamem.cancelling import cancel_and_wait
from stratamem.clock import Clock
from stratamem.errors import FenceResynced, LockBusy, PipelineError, StaleFencingToken
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.fencing import behind_the_store
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import LockGrant

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]


@contextlib.asynccontextmanager
async def holding(
    backend: PipelineBackend,
    key: str,
    owner: str,
    settings: PipelineSettings,
    clock: Clock,
    sleep: Sleep = asyncio.sleep,
) -> AsyncIterator[LockGrant]:
    """The lock `key` for `owner`, renewed while the body runs (`LockBusy` after the wait)."""
    grant = await _acquire(backend, key, owner, settings, clock, sleep)
    renewer = asyncio.ensure_future(_renew(backend, grant, settings, clock, sleep))
    try:
        yield grant
    except StaleFencingToken as exc:  # the next holder's grant must be above the store's token
        if not isinstance(exc, FenceResynced) and await behind_the_store(backend, grant, exc):
            raise FenceResynced(str(exc), newest=exc.newest) from exc
        raise
    finally:
        await cancel_and_wait(renewer)  # a renewer that lost the cancellation renews on forever
        await backend.release_lock(key, owner)


async def _acquire(
    backend: PipelineBackend,
    key: str,
    owner: str,
    settings: PipelineSettings,
    clock: Clock,
    sleep: Sleep,
) -> LockGrant:
    deadline = clock.now() + settings.lock_wait_s
    backoff = settings.lock_backoff_initial_s
    while True:
        now = clock.now()
        grant = await backend.acquire_lock(key, owner, ttl_ms=settings.lock_ttl_ms, now=now)
        if grant is not None:
            return grant
        if now >= deadline:
            raise LockBusy(f"{key} stayed busy for {settings.lock_wait_s:g} s")
        await sleep(min(backoff, deadline - now))
        backoff = min(backoff * settings.lock_backoff_factor, settings.lock_backoff_cap_s)


async def _renew(
    backend: PipelineBackend, grant: LockGrant, settings: PipelineSettings, clock: Clock,
    sleep: Sleep,
) -> None:  # fmt: skip
    while True:
        await sleep(settings.heartbeat_s)
        try:
            renewed = await backend.renew_lock(grant.key, grant.owner,
                                               ttl_ms=settings.lock_ttl_ms, now=clock.now())
        except PipelineError:
            log.exception("renewing %s failed", grant.key)
            renewed = False
        if not renewed:  # the fenced writes of the body will be refused from now on
            log.warning("lost the lock %s", grant.key)
            return
