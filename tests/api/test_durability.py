"""SIGKILL `stratamem serve` during a stream of captures: every acknowledged capture survives."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratamem.domain import Scope
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.store.sqlite import SqliteStore
from tests.api.process import READY_TIMEOUT_S, serving, stratamem, wait_for

pytestmark = pytest.mark.slow
REDIS_URL = "redis://127.0.0.1:6379/0"

WRITERS = 4
KILL_AFTER_ACKS = 40


class Stream:
    """Writers capture numbered messages until the server goes away; acks are recorded."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.acked: list[str] = []
        self.enough = threading.Event()
        self._lock = threading.Lock()

    def write(self, writer: int) -> None:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=30) as client:
            for n in range(100_000):
                body = {"session": f"w{writer}", "messages": [
                    {"role": "user", "content": f"writer {writer} message {n}", "id": f"{n}"}]}
                try:
                    response = client.post("/v1/capture", json=body)
                except httpx.TransportError:
                    return
                if response.status_code == 200:
                    self._ack(response.json()["stored"])

    def _ack(self, ids: list[str]) -> None:
        with self._lock:
            self.acked.extend(ids)
            if len(self.acked) >= KILL_AFTER_ACKS:
                self.enough.set()


# The killed service: the locks and the scheduler's lease it leaves behind lapse within seconds.
KILLED = {
    "STRATAMEM_PIPELINE_LOCK_TTL_MS": "1000",
    "STRATAMEM_PIPELINE_SCHEDULER_LEASE_MS": "3000",
}
# The restarted service: every pending session is due for L1, dead workers' deliveries, locks
# and the backlog scheduler's lease are taken over after a second.
CATCH_UP = {
    "STRATAMEM_PIPELINE_SCHEDULER_IN_FLIGHT_S": "2",
    "STRATAMEM_PIPELINE_SCHEDULER_BACKOFF_INITIAL_S": "0.5",
    "STRATAMEM_PIPELINE_SCHEDULER_LEASE_MS": "1000",
    "STRATAMEM_PIPELINE_SCHEDULER_INTERVAL_S": "0.2",
    "STRATAMEM_LAYERS_L1_EVERY_TURNS": "1",
    "STRATAMEM_PIPELINE_LOCK_TTL_MS": "1000",
    "STRATAMEM_PIPELINE_RECLAIM_IDLE_MS": "1000",
    "STRATAMEM_PIPELINE_LOCK_BACKOFF_CAP_S": "0.2",
    "STRATAMEM_PIPELINE_RECLAIM_INTERVAL_S": "0.2",
    "STRATAMEM_PIPELINE_PUMP_INTERVAL_S": "0.2",
}


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def pipeline_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The pipeline backend of both runs of `serve`: its SQLite file, or the local Redis."""
    if request.param == "sqlite":
        yield {}
        return
    prefix = f"test:{uuid.uuid4().hex}:"
    yield {"STRATAMEM_PIPELINE_BACKEND": "redis", "STRATAMEM_PIPELINE_REDIS_PREFIX": prefix}
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    asyncio.run(_drop(backend))


async def _drop(backend: RedisBackend) -> None:
    await backend.drop_all()
    await backend.close()


def test_acknowledged_captures_survive_sigkill_and_the_pipeline_catches_up(
    tmp_path: Path, pipeline_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    token = stratamem(data, "keys", "create", "alice").stdout.strip()
    log = tmp_path / "serve.log"
    no_embedding = {"STRATAMEM_BACKGROUND_EMBEDDING": "false", **KILLED, **pipeline_env}
    with serving(data, log, env=no_embedding) as server:
        stream = Stream(server.url, token)
        with ThreadPoolExecutor(WRITERS) as pool:
            for writer in range(WRITERS):
                pool.submit(stream.write, writer)
            assert stream.enough.wait(READY_TIMEOUT_S)
            server.kill()
    acked = list(stream.acked)
    assert len(acked) >= KILL_AFTER_ACKS
    assert _pending(data) > 0
    with serving(data, log, env={**CATCH_UP, **pipeline_env}) as server:
        _wait_until_caught_up(server.url, token)
    store = SqliteStore(data / "stratamem.db")
    try:
        found = {t.id for t in store.get_turns(Scope("alice"), acked)}
    finally:
        store.close()
    assert sorted(set(acked) - found) == []
    assert _pending(data) == 0


def _pending(data: Path) -> int:
    store = SqliteStore(data / "stratamem.db")
    try:
        return int(store.stats(Scope("alice"))["L0"]["pending_embeddings"])
    finally:
        store.close()


def _wait_until_caught_up(url: str, token: str) -> None:
    """The restarted service embeds what the killed one left pending and runs L1 on every
    session (a bounded wait on the process's progress)."""
    headers = {"Authorization": f"Bearer {token}"}

    def read() -> tuple[dict[str, Any], dict[str, Any]]:
        # The pipeline first: L1 commits its memories with its cursor, so stats read after a
        # "no pending turns" see them (read the other way round, L1 could finish in between).
        pipeline = httpx.get(f"{url}/v1/pipeline", headers=headers).json()
        return httpx.get(f"{url}/v1/stats", headers=headers).json(), pipeline

    def done(state: tuple[dict[str, Any], dict[str, Any]]) -> bool:
        stats, pipeline = state
        return stats["L0"]["pending_embeddings"] == 0 and pipeline["pending_turns"] == 0

    stats, pipeline = wait_for(read, done)
    assert stats["L1"]["records"] > 0 and pipeline["dead_letters"] == 0
