"""Readiness: `/v1/health` answers at once and says whether the embedding model is loaded;
`/v1/ready` is 503 until it is. (`serve` loads it as it starts: tests/api/process.py waits for
`/v1/ready` on every real `serve` process, tests/test_container.py with the local model.)"""

from __future__ import annotations

from pathlib import Path

import httpx

from stratamem.api import ServerSettings, Services, create_app
from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.embed import LocalEmbedder


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
