"""Request bodies are size-limited (413); CORS is off unless origins are configured."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from stratamem.api import create_app
from tests.api.conftest import Caller, message, new_caller, open_services

LIMIT = 4096
PREFLIGHT = {
    "Origin": "https://app.example",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization,content-type",
}


async def _client(tmp_path: Path, **server: object) -> AsyncIterator[httpx.AsyncClient]:
    services = open_services(tmp_path, **server)
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client
    await services.aclose()


async def test_a_body_over_the_limit_is_413_and_stores_nothing(tmp_path: Path) -> None:
    async for client in _client(tmp_path, max_body_bytes=LIMIT):
        alice = await new_caller(client, "alice")
        big = {"session": "s1", "messages": [message("x" * LIMIT)]}
        declared = await client.post("/v1/capture", json=big, headers=alice.headers)
        assert declared.status_code == 413
        assert declared.json()["error"]["type"] == "body_too_large"
        streamed = await client.post(
            "/v1/capture", content=_chunks(big), headers={**alice.headers, **_json()}
        )
        assert streamed.status_code == 413
        stats = (await client.get("/v1/stats", headers=alice.headers)).json()
        assert stats["L0"]["records"] == 0
        small = {"session": "s1", "messages": [message("x" * 100)]}
        assert (await client.post("/v1/capture", json=small, headers=alice.headers)).is_success


async def _chunks(body: dict[str, object]) -> AsyncIterator[bytes]:
    """A body without Content-Length: only counting while reading can catch it."""
    raw = json.dumps(body).encode()
    for start in range(0, len(raw), 1000):
        yield raw[start : start + 1000]


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


async def test_cors_is_off_by_default(client: httpx.AsyncClient, alice: Caller) -> None:
    preflight = await client.options("/v1/recall", headers=PREFLIGHT)
    assert "access-control-allow-origin" not in preflight.headers
    simple = await client.get("/v1/health", headers={"Origin": "https://app.example"})
    assert "access-control-allow-origin" not in simple.headers


async def test_cors_allows_only_the_configured_origins(tmp_path: Path) -> None:
    async for client in _client(tmp_path, cors_origins="https://app.example"):
        allowed = await client.options("/v1/recall", headers=PREFLIGHT)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        evil = {**PREFLIGHT, "Origin": "https://evil.example"}
        other = await client.options("/v1/recall", headers=evil)
        assert "access-control-allow-origin" not in other.headers


async def test_the_mcp_endpoint_has_the_same_limit_and_needs_a_key(tmp_path: Path) -> None:
    async for client in _client(tmp_path, max_body_bytes=LIMIT):
        alice = await new_caller(client, "alice")
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "pad": "x" * LIMIT}
        big = await client.post("/mcp", json=call, headers=alice.headers)
        assert big.status_code == 413
        anonymous = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                    "method": "tools/list"})  # fmt: skip
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["type"] == "unauthenticated"


async def test_no_page_that_loads_third_party_scripts(client: httpx.AsyncClient) -> None:
    assert (await client.get("/docs")).status_code == 404
    assert (await client.get("/redoc")).status_code == 404
    assert (await client.get("/openapi.json")).json()["info"]["title"] == "stratamem"


async def test_a_refused_preflight_is_in_the_error_shape(tmp_path: Path) -> None:
    async for client in _client(tmp_path, cors_origins="https://app.example"):
        evil = {**PREFLIGHT, "Origin": "https://evil.example"}
        refused = await client.options("/v1/recall", headers=evil)
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "cors_refused"
        assert "origin" in refused.json()["error"]["message"]
