"""SIGKILL `stratamem serve` during a stream of captures: every acknowledged capture survives."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from stratamem.domain import Scope
from stratamem.store.sqlite import SqliteStore
from tests.api.process import READY_TIMEOUT_S, serving, stratamem

pytestmark = pytest.mark.slow

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


def test_acknowledged_captures_survive_sigkill_and_embeddings_catch_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    token = stratamem(data, "keys", "create", "alice").stdout.strip()
    log = tmp_path / "serve.log"
    no_embedding = {"STRATAMEM_BACKGROUND_EMBEDDING": "false"}
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
    with serving(data, log) as server:
        _wait_until_embedded(server.url, token)
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


def _wait_until_embedded(url: str, token: str) -> None:
    """The restarted service embeds what the killed one left pending (bounded wait)."""
    headers = {"Authorization": f"Bearer {token}"}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        stats = httpx.get(f"{url}/v1/stats", headers=headers).json()
        if stats["L0"]["records"] and stats["L0"]["pending_embeddings"] == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"embeddings did not catch up: {stats}")
