"""Readiness: `/v1/health` answers at once and says whether the embedding model is loaded;
`/v1/ready` is 503 until it is. (`serve` loads it as it starts: tests/api/process.py waits for
`/v1/ready` on every real `serve` process, tests/test_container.py with the local model.)"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from stratamem.api import ServerSettings, Services, create_app
from stratamem.api.background import Background
from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.embed import LocalEmbedder
from stratamem.pipeline.settings import PipelineSettings

from .conftest import open_services


async def test_ready_only_once_the_local_model_is_loaded(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", background_embedding=False)
    memory = AsyncMemory.open(settings, embedder=LocalEmbedder(), clock=ManualClock(), llm=None)
    services = Services.over(memory, ServerSettings())
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://stratamem.test") as client:
        health = await client.get("/v1/health")
        assert (health.status_code, health.json()["ready"]) == (200, False)
        waiting = await client.get("/v1/ready")
        assert waiting.status_code == 503
        assert waiting.json()["error"]["type"] == "not_ready"
        await memory.load_embedder()
        ready = await client.get("/v1/ready")
        assert (ready.status_code, ready.json()["ready"]) == (200, True)
        assert (await client.get("/v1/health")).json()["ready"] is True
    await services.aclose()


async def test_a_service_without_a_model_to_load_is_ready_at_once(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/v1/ready")).status_code == 200
    assert (await client.get("/v1/health")).json()["ready"] is True


async def test_a_worker_that_stopped_makes_the_service_not_ready_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`serve` used to answer on with no consumer behind it once its worker had stopped."""
    services = open_services(tmp_path)

    def broken_usage() -> dict[str, dict[str, int]]:
        raise RuntimeError("a bug the worker does not survive")

    background = Background(services, PipelineSettings(), workers=1)
    background.worker.executors.add_usage_source(broken_usage)  # read as it publishes its status
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://stratamem.test") as client:
        assert (await client.get("/v1/ready")).status_code == 200
        with caplog.at_level(logging.ERROR, logger="stratamem.api.background"):
            await background.start()
            await asyncio.wait_for(background.halted.wait(), timeout=30)
        answer = await client.get("/v1/ready")
        assert answer.status_code == 503
        assert answer.json()["error"]["type"] == "not_ready"
        assert "worker stopped" in answer.json()["error"]["message"]
        assert any("worker stopped" in r.getMessage() for r in caplog.records)
    with pytest.raises(RuntimeError):
        await background.stop()
    await services.aclose()
