"""SIGTERM to `stratamem serve` while a request and a worker's task wait on an LLM that never
answers: both get the one bound `STRATAMEM_SERVER_SHUTDOWN_TIMEOUT_S` (the worker's own, longer
grace period does not add to it), are cancelled (the request's client gets 503
`shutting_down`), the process runs its orderly shutdown (locks released) and exits 0; the work
neither had finished stays owed."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratamem.api.app import UNWIND_S
from stratamem.config import Settings
from stratamem.pipeline.runner import SQLITE_FILE
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.opening import open_store
from stratamem.testing import Reply, ScriptedLLM
from tests.api.process import serving, stratamem

pytestmark = pytest.mark.slow

SHUTDOWN_TIMEOUT_S = 2
GRACE_PERIOD_S = 3600  # the worker's own: capped by the shutdown bound, never added to it
MARGIN_S = 20.0  # the lifespan's shutdown and the interpreter's exit, on a loaded machine


@pytest.fixture
def silent_llm() -> Iterator[ScriptedLLM]:
    """An endpoint that takes every request and never answers (until it is stopped)."""
    with ScriptedLLM() as llm:
        llm.on("L1", lambda request: Reply.held())
        yield llm


def serve_env(llm: ScriptedLLM) -> dict[str, str]:
    return {
        "STRATAMEM_LLM_BASE_URL": llm.base_url,
        "STRATAMEM_LLM_MODEL": "scripted-chat",
        "STRATAMEM_LLM_TIMEOUT_S": "600",  # the LLM client's own bound is not what stops it
        "STRATAMEM_SERVER_SHUTDOWN_TIMEOUT_S": str(SHUTDOWN_TIMEOUT_S),
        "STRATAMEM_PIPELINE_GRACE_PERIOD_S": str(GRACE_PERIOD_S),
    }


class WaitedFlush(threading.Thread):
    """`POST /v1/sessions/{session}/flush?wait=true`, held open by the silent LLM."""

    def __init__(self, url: str, headers: dict[str, str], session: str) -> None:
        super().__init__(daemon=True)
        self.url, self.headers, self.session = url, headers, session
        self.outcome: httpx.Response | httpx.TransportError | None = None

    def run(self) -> None:
        url = f"{self.url}/v1/sessions/{self.session}/flush?wait=true"
        try:
            self.outcome = httpx.post(url, headers=self.headers, timeout=120)
        except httpx.TransportError as e:
            self.outcome = e


def test_sigterm_cancels_hung_work_within_its_bounds_and_keeps_it_owed(
    tmp_path: Path, silent_llm: ScriptedLLM
) -> None:
    """The worker's L1 task of s1 and a waited flush of s2 both wait on the LLM: both are
    cancelled at the shutdown bound, so the process exits within it plus the unwinding's own
    bound (it would wait an hour for the task if the worker's grace period followed the
    requests' bound); both sessions still owe their turns and neither lock is left to lapse."""
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    auth = {"Authorization": f"Bearer {stratamem(data, 'keys', 'create', 'alice').stdout.strip()}"}
    log = tmp_path / "serve.log"
    with serving(data, log, "--workers", "1", env=serve_env(silent_llm)) as server:
        for count, session in enumerate(("s1", "s2"), start=1):
            body = {"session": session, "messages": [{"role": "user", "content": "I keep bees"}]}
            assert httpx.post(f"{server.url}/v1/capture", json=body, headers=auth).is_success
            if session == "s2":  # s1's L1 task holds the worker's only slot: s2's stays queued
                flush = WaitedFlush(server.url, auth, session)
                flush.start()
            assert silent_llm.wait_held(count, timeout_s=60), f"{session} never reached the LLM"
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=SHUTDOWN_TIMEOUT_S + UNWIND_S + MARGIN_S)
    flush.join(timeout=30)
    text = log.read_text()
    assert code == 0, text
    assert "timeout graceful shutdown exceeded" in text
    assert "Application shutdown complete" in text
    assert isinstance(flush.outcome, httpx.Response), flush.outcome
    assert flush.outcome.status_code == 503 and flush.outcome.headers["Retry-After"] == "1"
    assert flush.outcome.json()["error"]["type"] == "shutting_down"
    assert "Exception in ASGI application" not in text
    assert owed_sessions(data) == [("alice", "s1", 0), ("alice", "s2", 0)]
    assert asyncio.run(locks_free(data, ["session/alice/s1", "session/alice/s2"]))


def owed_sessions(data: Path) -> list[tuple[str, str, int]]:
    store = open_store(Settings(data_dir=data, embedder="hash:64"))
    try:
        owing = SqlBacklogStore(store).sessions_owing_l1(None, 10)
    finally:
        store.close()
    return [(s.tenant, s.session, s.cursor_seq) for s in owing]


async def locks_free(data: Path, keys: list[str]) -> bool:
    """Released at shutdown, not left to lapse after their TTL (120 s by default)."""
    backend = SqliteBackend(data / SQLITE_FILE)
    try:
        grants = [await backend.acquire_lock(k, "test", ttl_ms=1000, now=time.time()) for k in keys]
    finally:
        await backend.close()
    return None not in grants
