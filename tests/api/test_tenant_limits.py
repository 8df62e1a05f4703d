"""Per-tenant limits: requests and body bytes a second, pending embeddings; each refusal is a
429 in the error shape with Retry-After, and one tenant's limit never touches another's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from starlette.types import Message, Receive, Scope, Send

from stratamem.api import ServerSettings, Services, create_app
from stratamem.api.middleware import BodyLimit
from stratamem.api.services import limits_of
from tests.api.conftest import ADMIN, Caller, message, new_caller, open_services


class Clock:
    """The monotonic clock of the limits, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def limited(tmp_path: Path, clock: Clock, **server: object) -> AsyncIterator[
    tuple[httpx.AsyncClient, Services]
]:
    services = open_services(tmp_path, **server)
    services.limits = limits_of(services.settings, clock)
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client, services
    await services.aclose()


def assert_429(response: httpx.Response, retry_after: str) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["type"] == "rate_limited"
    assert response.headers["retry-after"] == retry_after


async def test_requests_a_second_per_tenant(tmp_path: Path) -> None:
    clock = Clock()
    async for client, _ in limited(tmp_path, clock, tenant_requests_per_s=2,
                                   tenant_request_burst=3):  # fmt: skip
        alice, bob = await new_caller(client, "alice"), await new_caller(client, "bob")
        for _ in range(3):
            assert (await client.get("/v1/stats", headers=alice.headers)).status_code == 200
        assert_429(await client.get("/v1/stats", headers=alice.headers), "1")
        assert (await client.get("/v1/stats", headers=bob.headers)).status_code == 200
        mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        assert_429(await client.post("/mcp", json=mcp, headers=alice.headers), "1")
        clock.now += 0.5  # one request's worth of tokens
        assert (await client.get("/v1/stats", headers=alice.headers)).status_code == 200
        assert_429(await client.get("/v1/stats", headers=alice.headers), "1")
        assert (await client.get("/v1/admin/tenants", headers=ADMIN)).status_code == 200


async def test_body_bytes_a_second_per_tenant(tmp_path: Path) -> None:
    clock = Clock()
    async for client, _ in limited(tmp_path, clock, tenant_bytes_per_s=2048,
                                   tenant_byte_burst=4096):  # fmt: skip
        alice, bob = await new_caller(client, "alice"), await new_caller(client, "bob")
        body = {"session": "s1", "messages": [message("x" * 1500)]}
        for _ in range(2):
            ok = await client.post("/v1/capture", json=body, headers=alice.headers)
            assert ok.status_code == 200
        assert_429(await client.post("/v1/capture", json=body, headers=alice.headers), "1")
        assert (await client.post("/v1/capture", json=body, headers=bob.headers)).is_success
        clock.now += 10
        assert (await client.post("/v1/capture", json=body, headers=alice.headers)).is_success


async def test_captures_wait_while_too_much_is_pending(tmp_path: Path) -> None:
    async for client, services in limited(tmp_path, Clock(), tenant_pending_embeddings=3):
        alice, bob = await new_caller(client, "alice"), await new_caller(client, "bob")
        three = {"session": "s1", "messages": [message(f"m{i}") for i in range(3)]}
        assert (await client.post("/v1/capture", json=three, headers=alice.headers)).is_success
        one = {"session": "s1", "messages": [message("one more")]}
        refused = await client.post("/v1/capture", json=one, headers=alice.headers)
        assert_429(refused, "5")
        assert "waiting to be embedded" in refused.json()["error"]["message"]
        assert (await client.post("/v1/capture", json=one, headers=bob.headers)).is_success
        recalled = await client.post("/v1/recall", json={"query": "m1"}, headers=alice.headers)
        assert recalled.status_code == 200
        await services.memory.embed_pending()
        assert (await client.post("/v1/capture", json=one, headers=alice.headers)).is_success


def test_the_limits_are_on_by_default() -> None:
    defaults = ServerSettings()
    assert defaults.tenant_requests_per_s > 0 and defaults.tenant_pending_embeddings > 0
    assert defaults.tenant_byte_burst >= defaults.max_body_bytes


async def test_mcp_offers_no_event_stream(client: httpx.AsyncClient, alice: Caller) -> None:
    for method in ("GET", "DELETE"):
        response = await client.request(method, "/mcp", headers=alice.headers)
        assert response.status_code == 405
        assert response.json()["error"]["type"] == "method_not_allowed"


async def test_a_body_that_does_not_arrive_in_time_is_408() -> None:
    """A client sends the start of a body, then nothing: the wait is bounded (50 ms here)."""
    chunks = [{"type": "http.request", "body": b"{", "more_body": True}]

    async def receive() -> Message:
        if chunks:
            return chunks.pop()
        await asyncio.Event().wait()  # never set: the client stalls
        raise AssertionError("unreachable")

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def read_all(scope: Scope, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body"):
            pass

    await BodyLimit(read_all, limit=1_000_000, timeout_s=0.05)(
        {"type": "http", "headers": []}, receive, send
    )
    assert sent[0]["status"] == 408
    assert b"body_too_slow" in sent[1]["body"]
