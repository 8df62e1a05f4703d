"""Cross-tenant probes: bob calls every route with alice's ids, sessions and words.

Nothing of alice's leaks into bob's answers, and alice's data, keys and answers are unchanged
afterwards. A route added to the API without a probe here fails the coverage test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from stratamem.api import Services
from stratamem.domain import MemoryRecord, MemoryType, Scope
from tests.api.conftest import ADMIN, Caller, message

SECRET = "zanzibar"
SESSION = "alice-session"


@dataclass(frozen=True)
class Probe:
    method: str
    path: str
    body: dict[str, Any] | None = None
    admin_only: bool = False


def probes(alice: Caller, alice_ids: list[str]) -> list[Probe]:
    """One probe per route, each naming alice's tenant, session, ids or words."""
    a = alice.tenant
    return [
        Probe("POST", "/v1/capture", {"session": SESSION, "messages": [
            message(f"{SECRET} from bob", id="m-1")]}),
        Probe("POST", "/v1/recall", {"query": SECRET, "session": SESSION}),
        Probe("POST", "/v1/search/memories", {"query": SECRET, "sessions": [SESSION]}),
        Probe("POST", "/v1/search/conversations", {"query": SECRET, "sessions": [SESSION]}),
        Probe("GET", "/v1/stats"),
        Probe("GET", "/v1/health"),
        Probe("GET", "/metrics"),
        Probe("POST", "/v1/admin/tenants", {"name": a}, admin_only=True),
        Probe("GET", "/v1/admin/tenants", admin_only=True),
        Probe("POST", f"/v1/admin/tenants/{a}/keys", {"label": "stolen"}, admin_only=True),
        Probe("GET", f"/v1/admin/tenants/{a}/keys", admin_only=True),
        Probe("DELETE", f"/v1/admin/keys/{alice.key_id}", admin_only=True),
    ]


def _template(path: str, alice: Caller) -> str:
    return (
        path.replace(f"/tenants/{alice.tenant}/", "/tenants/{tenant}/")
        .replace(alice.key_id, "{key_id}")
    )


async def _seed_alice(client: httpx.AsyncClient, services: Services, alice: Caller) -> list[str]:
    body = {"session": SESSION, "messages": [message(f"my {SECRET} code is 4417", id="m-1")]}
    captured = await client.post("/v1/capture", json=body, headers=alice.headers)
    memory = MemoryRecord(
        id="mem-1", tenant=alice.tenant, type=MemoryType.PERSONA,
        content=f"alice keeps her {SECRET} code private", session=SESSION,
    )
    services.memory.store.upsert_memories(Scope(alice.tenant), [memory])
    ids: list[str] = captured.json()["ids"]
    return [*ids, memory.id]


async def _alice_view(client: httpx.AsyncClient, alice: Caller) -> dict[str, Any]:
    query = {"query": SECRET, "k": 20}
    return {
        "stats": (await client.get("/v1/stats", headers=alice.headers)).json(),
        "turns": (await client.post(
            "/v1/search/conversations", json=query, headers=alice.headers)).json(),
        "memories": (await client.post(
            "/v1/search/memories", json=query, headers=alice.headers)).json(),
        "keys": (await client.get(
            f"/v1/admin/tenants/{alice.tenant}/keys", headers=ADMIN)).json(),
        "tenants": (await client.get("/v1/admin/tenants", headers=ADMIN)).json(),
    }


async def test_every_route_has_a_probe(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    spec = (await client.get("/openapi.json")).json()
    routes = {
        (method.upper(), path) for path, ops in spec["paths"].items() for method in ops
    }
    probed = {(p.method, _template(p.path, alice)) for p in probes(alice, [])}
    assert routes == probed


async def test_bob_sees_and_changes_nothing_of_alice(
    client: httpx.AsyncClient, services: Services, alice: Caller, bob: Caller
) -> None:
    alice_ids = await _seed_alice(client, services, alice)
    before = await _alice_view(client, alice)
    assert before["turns"]["hits"] and before["memories"]["hits"]
    for probe in probes(alice, alice_ids):
        response = await client.request(
            probe.method, probe.path, json=probe.body, headers=bob.headers
        )
        if probe.admin_only:
            assert response.status_code == 403, probe
        else:
            assert response.status_code == 200, (probe, response.text)
        leaked = [i for i in alice_ids if i in response.text]
        assert leaked == [], probe
        assert "4417" not in response.text and "private" not in response.text, response.text
    assert await _alice_view(client, alice) == before
    bob_stats = (await client.get("/v1/stats", headers=bob.headers)).json()
    assert bob_stats["L0"]["records"] == 1 and bob_stats["L1"]["records"] == 0
