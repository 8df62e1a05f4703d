"""A waited flush (`POST …/flush?wait=true`) while the background pipeline works on the same
session: it used to race the running L1 (409 "the cursor is at 40, not 0", and background tasks
failed and retried); now it takes its turn under the same locks and answers 200."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sqlite3

import httpx

from stratamem.api import Services
from stratamem.api.background import Background
from stratamem.api.errors import domain_error_response
from stratamem.domain import Scope
from stratamem.errors import FenceResynced
from stratamem.layers.task_types import L1
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.pipeline.worker import Outcome

from .conftest import Caller, message


async def test_a_waited_flush_takes_its_turn_with_the_background_work(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    texts = [f"I visited the city number {i} in May." for i in range(400)]
    body = {"session": "s1", "messages": [message(t) for t in texts]}
    assert (await client.post("/v1/capture", json=body, headers=alice.headers)).is_success
    settings = PipelineSettings(lock_backoff_initial_s=0.001, lock_backoff_cap_s=0.01)
    background = Background(services, settings, workers=2)
    assert background.scheduler is not None and await background.scheduler.tick() is not None
    backend = services.require_pipeline()
    for _ in range(3):  # more of the session's L1 work in flight beside the scheduler's
        await backend.enqueue(Task(L1, "alice", "s1"), now=0.0)
    deliveries = await backend.consume("bg", count=10, block_ms=0, now=0.0)
    assert len(deliveries) == 4

    flush = client.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)
    *outcomes, flushed = await asyncio.gather(
        *(background.worker.handle(d) for d in deliveries), flush
    )
    assert flushed.status_code == 200, flushed.text
    result = flushed.json()["result"]
    assert result["l1"] and result["l1"][-1]["skipped"] and result["l2"] is not None
    assert set(outcomes) <= {Outcome.COMPLETED, Outcome.SKIPPED}
    metrics = background.worker.metrics
    assert (metrics.failed, metrics.retried, metrics.dropped) == (0, 0, 0)
    status = (await client.get("/v1/pipeline", headers=alice.headers)).json()
    assert status["pending_turns"] == 0
    # the execution log shows the flush's stages taking turns with the tasks under each lock
    runs = services.memory.layer_service().evidence.executions(Scope("alice"))
    assert {r.type for r in runs if r.attempt.worker.startswith("api-flush")} >= {"L1", "L2"}
    for lock in {r.lock_key for r in runs}:
        held = [r for r in runs if r.lock_key == lock]
        assert all(r.end is not None for r in held)
        for before, after in itertools.pairwise(held):
            assert before.end is not None and before.end <= after.attempt.started_at, lock


async def test_a_flush_without_wait_is_queued_and_kept_owed(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    queued = await client.post("/v1/sessions/s1/flush", headers=alice.headers)
    assert queued.status_code == 202 and queued.json()["queued"]["type"] == "flush"
    backlog = services.memory.backlog
    assert backlog is not None
    assert [(r.tenant, r.session) for r in backlog.flush_requests(None, 10)] == [("alice", "s1")]


async def test_a_waited_flush_completes_after_the_backend_lost_its_token_counters(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    """The store keeps the tokens it accepted; a backend that lost its state (a Redis restart,
    here the SQLite file's counters wiped) grants them again. The flush answered 409 though
    sending it again succeeded; now it raises the counter and runs the stage again itself."""
    body = {"session": "s1", "messages": [message("I moved to Lisbon in May.")]}
    assert (await client.post("/v1/capture", json=body, headers=alice.headers)).is_success
    url = "/v1/sessions/s1/flush?wait=true"
    assert (await client.post(url, headers=alice.headers)).status_code == 200
    backend = services.require_pipeline()
    assert isinstance(backend, SqliteBackend)
    with contextlib.closing(sqlite3.connect(backend.path)) as raw, raw:
        raw.execute("DELETE FROM lock_fences")
    again = await client.post(url, headers=alice.headers)
    assert again.status_code == 200, again.text
    assert await backend.fence_token("session/alice/s1") > 1


def test_a_flush_the_store_kept_refusing_after_a_resync_is_503_with_retry_after() -> None:
    refused = domain_error_response(FenceResynced("behind the store", newest=7))
    assert (refused.status_code, refused.headers["Retry-After"]) == (503, "1")
    assert json.loads(refused.body)["error"]["type"] == "busy"
