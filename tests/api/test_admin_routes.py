"""Tenants and keys over the admin routes: only the admin key manages them."""

from __future__ import annotations

from pathlib import Path

import httpx

from stratamem.api import create_app
from tests.api.conftest import ADMIN, Caller, open_services


async def test_admin_creates_and_lists_tenants_and_keys(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    tenants = await client.get("/v1/admin/tenants", headers=ADMIN)
    assert [t["name"] for t in tenants.json()] == ["alice"]
    second = await client.post("/v1/admin/tenants/alice/keys", json={"label": "ci"}, headers=ADMIN)
    assert second.status_code == 201
    assert second.json()["token"].startswith("smk_")
    keys = (await client.get("/v1/admin/tenants/alice/keys", headers=ADMIN)).json()
    assert [k["label"] for k in keys] == ["", "ci"]
    assert all("token" not in k for k in keys)


async def test_conflicts_and_unknowns(client: httpx.AsyncClient, alice: Caller) -> None:
    again = await client.post("/v1/admin/tenants", json={"name": "alice"}, headers=ADMIN)
    assert again.status_code == 409
    assert again.json()["error"]["type"] == "already_exists"
    nobody = await client.post("/v1/admin/tenants/nobody/keys", json={}, headers=ADMIN)
    assert nobody.status_code == 404
    bad = await client.post("/v1/admin/tenants", json={"name": "a/b"}, headers=ADMIN)
    assert bad.status_code == 422
    unknown_key = await client.delete("/v1/admin/keys/000000000000", headers=ADMIN)
    assert unknown_key.status_code == 404


async def test_tenant_keys_and_wrong_keys_cannot_use_admin_routes(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    as_tenant = await client.get("/v1/admin/tenants", headers=alice.headers)
    assert as_tenant.status_code == 403
    wrong = await client.get("/v1/admin/tenants", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    missing = await client.get("/v1/admin/tenants")
    assert missing.status_code == 401


async def test_admin_routes_are_off_without_an_admin_key(tmp_path: Path) -> None:
    services = open_services(tmp_path, admin_key=None)
    transport = httpx.ASGITransport(app=create_app(services))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.get("/v1/admin/tenants", headers=ADMIN)
        assert response.status_code == 403
        assert "STRATAMEM_SERVER_ADMIN_KEY" in response.json()["error"]["message"]
    finally:
        await services.aclose()
