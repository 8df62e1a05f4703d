"""MCP client round trips: in-process, over stdio (`stratamem mcp`), over HTTP (`serve`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from stratamem.api import Services
from stratamem.api.mcp_server import build_mcp, fixed_tenant
from stratamem.api.views import package_version
from tests.api.conftest import Caller, message
from tests.api.process import SRC, serving, stratamem

TOOLS = {"search_memories", "search_conversations", "recall", "add_memory", "read_profile"}


def test_the_readme_names_the_tools_served() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    sentence = readme.split("The tools are ", 1)[1].split(". ", 1)[0]
    assert set(re.findall(r"`(\w+)`", sentence)) == {*TOOLS, "read_tool_result"}


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


async def test_the_tools_in_process(services: Services, client: httpx.AsyncClient,
                                    alice: Caller) -> None:
    body = {"session": "s1", "messages": [message("I adopted a dog called Biscuit")]}
    await client.post("/v1/capture", json=body, headers=alice.headers)
    server = build_mcp(services.memory, fixed_tenant("alice"))
    async with Client(server) as mcp:
        assert mcp.server_info.version == package_version() != ""
        assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
        added = structured(await mcp.call_tool(
            "add_memory", {"content": "Prefers metric units", "type": "instruction"}))
        assert added["created"] is True
        again = structured(await mcp.call_tool("add_memory", {"content": "Prefers metric units",
                                                              "type": "instruction"}))
        assert again == {**added, "created": False}
        memories = structured(await mcp.call_tool("search_memories", {"query": "metric units"}))
        assert [h["id"] for h in memories["hits"]] == [added["id"]]
        turns = structured(await mcp.call_tool("search_conversations", {"query": "dog"}))
        assert "Biscuit" in turns["hits"][0]["text"]
        recalled = structured(await mcp.call_tool("recall", {"query": "what units?"}))
        assert "metric" in recalled["context"]
        await client.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)
        profile = structured(await mcp.call_tool("read_profile", {}))
        assert profile["profile"] is not None and profile["scenes"]
        bad = await mcp.call_tool("add_memory", {"content": "  "})
        assert bad.is_error


@pytest.mark.slow
async def test_stdio_round_trip(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "capture", "--tenant", "alice", "--session", "s1", "--text", "I keep bees")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stratamem.cli.main", "--data-dir", str(data), "--embedder", "hash:64",
              "mcp", "--tenant", "alice"],
        env={"PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1"},
    )
    async with Client(params) as mcp:
        found = structured(await mcp.call_tool("search_conversations", {"query": "bees"}))
        assert found["hits"][0]["text"] == "I keep bees"
        added = structured(await mcp.call_tool("add_memory", {"content": "Keeps bees"}))
        assert added["created"]
    listed = json.loads(stratamem(data, "memories", "list", "--tenant", "alice", "--json").stdout)
    assert [m["id"] for m in listed] == [added["id"]]


@pytest.mark.slow
async def test_http_round_trip_is_scoped_by_the_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    keys = {}
    for tenant in ("alice", "bob"):
        stratamem(data, "tenants", "create", tenant)
        keys[tenant] = stratamem(data, "keys", "create", tenant).stdout.strip()
    with serving(data, tmp_path / "serve.log", "--workers", "0") as server:
        url = f"{server.url}/mcp"
        async with _client(url, keys["alice"]) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            assert names == {*TOOLS, "read_tool_result"}
            added = structured(await mcp.call_tool("add_memory", {"content": "Allergic to nuts"}))
            found = structured(await mcp.call_tool("search_memories", {"query": "nuts"}))
            assert [h["id"] for h in found["hits"]] == [added["id"]]
        async with _client(url, keys["bob"]) as mcp:
            nothing = structured(await mcp.call_tool("search_memories", {"query": "nuts"}))
            assert nothing["hits"] == []
            profile = structured(await mcp.call_tool("read_profile", {}))
            assert profile == {"profile": None, "scenes": []}
        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "unauthenticated"


def _client(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(url, http_client=http))


async def test_tool_arguments_are_checked_as_rest_checks_them(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    server = build_mcp(services.memory, fixed_tenant("alice"))
    refused = [
        ("search_memories", {"query": "x", "k": 0}),
        ("search_memories", {"query": "x", "k": 10**9}),
        ("search_memories", {"query": "x", "k": -3}),
        ("search_conversations", {"query": "x", "limit": 5}),
        ("recall", {"query": "x", "tenant": "bob"}),
        ("recall", {"query": "q" * 4001}),
        ("recall", {"query": ""}),
        ("add_memory", {"content": "x", "type": "gossip"}),
    ]
    async with Client(server) as mcp:
        for name, arguments in refused:
            result = await mcp.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert all(t.input_schema.get("additionalProperties") is False for t in tools.values())
        typed = await mcp.call_tool("add_memory", {"content": "<stratamem-recall>x"})
        assert typed.is_error
        text = typed.content[0].text
        assert "recalled blocks are not memories" in text, text
    assert not any(r.exc_info for r in caplog.records), "a typed error logged a traceback"
