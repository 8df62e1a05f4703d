"""Context offload through the REST API and the MCP read-back tool; stages run by the serve
worker, stepped by hand."""

from __future__ import annotations

import json
from typing import Any

import httpx
from mcp import Client

from stratamem.api import Services
from stratamem.api.background import Background
from stratamem.api.mcp_server import build_mcp, fixed_tenant
from stratamem.pipeline.settings import PipelineSettings
from tests.api.conftest import Caller

SESSION = "task-1"
LONG = "line of the build log\n" * 300 + "ERROR: disk quota exceeded on /var\n" + "ok\n" * 50


async def _run_queued_stages(services: Services) -> int:
    """Hand every ready task to the serve worker (offload-l1 etc.); how many were run."""
    background = Background(services, PipelineSettings(), workers=1)
    backend = services.require_pipeline()
    done = 0
    while deliveries := await backend.consume("test", count=10, block_ms=0, now=0.0):
        for delivery in deliveries:
            await background.worker.handle(delivery)
            done += 1
    return done


async def _ingest(client: httpx.AsyncClient, who: Caller) -> dict[str, Any]:
    pairs = [{"call_id": f"call-{i}", "tool": "shell", "params": {"cmd": "make"},
              "result": LONG} for i in range(8)]  # fmt: skip
    path = f"/v1/offload/sessions/{SESSION}/tool-results"
    response = await client.post(path, json={"pairs": pairs}, headers=who.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_tool_results_are_summarised_compacted_and_read_back(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    ingested = await _ingest(client, alice)
    assert len(ingested["stored"]) == 8 and ingested["enqueued"]
    assert await _run_queued_stages(services) >= 1
    entries = (await client.get(f"/v1/offload/sessions/{SESSION}/entries",
                                headers=alice.headers)).json()  # fmt: skip
    assert len(entries) == 8 and all(e["ref_id"] for e in entries)
    messages = [{"role": "user", "content": "build it"}] + [
        {"role": "tool", "tool_call_id": f"call-{i}", "content": LONG} for i in range(8)
    ]
    compacted = await client.post(f"/v1/offload/sessions/{SESSION}/compact", headers=alice.headers,
                                  json={"messages": messages, "budget_tokens": 4000})
    assert compacted.status_code == 200
    assert compacted.json()["tokens_after"] < compacted.json()["tokens_before"]
    ref = entries[0]["ref_id"]
    whole = (await client.get(f"/v1/offload/refs/{ref}?max_tokens=100000",
                              headers=alice.headers)).json()  # fmt: skip
    assert whole["complete"] and whole["text"] == LONG
    around = (await client.get(f"/v1/offload/refs/{ref}?query=quota&max_tokens=50",
                               headers=alice.headers)).json()  # fmt: skip
    assert "disk quota exceeded" in around["text"] and not around["complete"]
    diagrams = await client.get(f"/v1/offload/sessions/{SESSION}/diagrams", headers=alice.headers)
    assert diagrams.status_code == 200 and "diagrams" in diagrams.json()
    marked = await client.post(f"/v1/offload/sessions/{SESSION}/user-messages",
                               json={"text": "now deploy it", "id": "u-2"},
                               headers=alice.headers)  # fmt: skip
    assert marked.json() == {"id": "u-2"}


async def test_the_mcp_tool_reads_a_ref_back(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    await _ingest(client, alice)
    await _run_queued_stages(services)
    entries = (await client.get(f"/v1/offload/sessions/{SESSION}/entries",
                                headers=alice.headers)).json()  # fmt: skip
    server = build_mcp(services.memory, fixed_tenant("alice"), services.offload)
    async with Client(server) as mcp:
        result = await mcp.call_tool("read_tool_result",
                                     {"ref_id": entries[0]["ref_id"], "query": "quota"})
        assert not result.is_error
        body = result.structured_content or json.loads(result.content[0].text)
        assert "disk quota exceeded" in body["text"]
        missing = await mcp.call_tool("read_tool_result", {"ref_id": "r_nothing"})
        assert missing.is_error
    other = build_mcp(services.memory, fixed_tenant("bob"), services.offload)
    async with Client(other) as mcp:
        refused = await mcp.call_tool("read_tool_result", {"ref_id": entries[0]["ref_id"]})
        assert refused.is_error
