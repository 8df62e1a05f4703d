"""Capture, recall, search and stats through the REST API."""

from __future__ import annotations

import httpx

from tests.api.conftest import ADMIN, Caller, message


async def capture(client: httpx.AsyncClient, who: Caller, session: str, *texts: str) -> list[str]:
    response = await client.post(
        "/v1/capture",
        json={"session": session, "messages": [message(t) for t in texts]},
        headers=who.headers,
    )
    assert response.status_code == 200, response.text
    ids: list[str] = response.json()["ids"]
    return ids


async def test_captured_turns_are_found_by_search_and_recall(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    ids = await capture(client, alice, "s1", "I adopted a dog called Biscuit", "I work nights")
    found = await client.post(
        "/v1/search/conversations", json={"query": "dog Biscuit", "k": 5}, headers=alice.headers
    )
    assert found.status_code == 200
    hits = found.json()["hits"]
    assert hits[0]["id"] == ids[0]
    assert (hits[0]["layer"], hits[0]["session"]) == ("L0", "s1")
    recalled = await client.post(
        "/v1/recall", json={"query": "what is my dog called?"}, headers=alice.headers
    )
    assert recalled.status_code == 200
    assert "Biscuit" in recalled.json()["context"]
    assert {"context", "stable", "hits", "stats"} <= set(recalled.json())


async def test_capture_is_idempotent(client: httpx.AsyncClient, alice: Caller) -> None:
    body = {"session": "s1", "messages": [message("same words", id="m-1")]}
    first = (await client.post("/v1/capture", json=body, headers=alice.headers)).json()
    second = (await client.post("/v1/capture", json=body, headers=alice.headers)).json()
    assert first["stored"] == first["ids"] == second["duplicates"]
    assert second["stored"] == []
    stats = (await client.get("/v1/stats", headers=alice.headers)).json()
    assert stats["L0"]["records"] == 1


async def test_search_memories_sees_only_l1(client: httpx.AsyncClient, alice: Caller) -> None:
    await capture(client, alice, "s1", "I adopted a dog called Biscuit")
    found = await client.post(
        "/v1/search/memories",
        json={"query": "Biscuit", "types": ["persona"]},
        headers=alice.headers,
    )
    assert found.status_code == 200
    assert found.json() == {"hits": []}


async def test_invalid_input_is_422_in_the_one_error_shape(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    cases = [
        {"session": "s1", "messages": [message("x", role="robot")]},
        {"session": "../../etc", "messages": [message("x")]},
        {"session": "s1", "messages": [message("   ")]},
        {"session": "s1", "messages": []},
        {"session": "s1", "messages": [message("x")], "tenant": "bob"},
    ]
    for body in cases:
        response = await client.post("/v1/capture", json=body, headers=alice.headers)
        assert response.status_code == 422, body
        assert set(response.json()) == {"error"}
        assert set(response.json()["error"]) == {"type", "message"}
    stats = (await client.get("/v1/stats", headers=alice.headers)).json()
    assert stats["L0"]["records"] == 0


async def test_broken_json_and_unknown_routes_keep_the_error_shape(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    broken = await client.post(
        "/v1/capture",
        content=b"{not json",
        headers={**alice.headers, "Content-Type": "application/json"},
    )
    missing = await client.get("/v1/nothing-here", headers=alice.headers)
    wrong_method = await client.get("/v1/capture", headers=alice.headers)
    assert [broken.status_code, missing.status_code, wrong_method.status_code] == [422, 404, 405]
    for response in (broken, missing, wrong_method):
        assert set(response.json()["error"]) == {"type", "message"}


async def test_keys_are_required_and_revocation_is_immediate(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    query = {"query": "anything"}
    none = await client.post("/v1/recall", json=query)
    assert none.status_code == 401
    assert none.headers["www-authenticate"] == "Bearer"
    assert none.json()["error"]["type"] == "unauthenticated"
    assert (await client.post("/v1/recall", json=query, headers=alice.headers)).status_code == 200
    revoked = await client.delete(f"/v1/admin/keys/{alice.key_id}", headers=ADMIN)
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    after = await client.post("/v1/recall", json=query, headers=alice.headers)
    assert after.status_code == 401


async def test_health_and_metrics_need_no_key_and_name_no_tenant(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    await capture(client, alice, "secret-session", "words")
    health = await client.get("/v1/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = metrics.text
    assert 'stratamem_http_requests_total{method="POST",route="/v1/capture",status="200"} 1' in text
    assert "stratamem_turns 1" in text
    assert "stratamem_tenants 1" in text
    assert "stratamem_captured_messages_total 1" in text
    assert "stratamem_pipeline_dead 0" in text
    assert "alice" not in text
    assert "secret-session" not in text


async def test_unknown_query_parameters_and_loose_types_are_refused(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    misspelt = await client.post("/v1/sessions/s1/flush?wiat=true", headers=alice.headers)
    assert misspelt.status_code == 422
    assert "wiat" in misspelt.json()["error"]["message"]
    loose = [{"query": "x", "k": True}, {"query": "x", "until": False}, {"query": "x", "k": "5"}]
    for body in loose:
        response = await client.post("/v1/search/conversations", json=body, headers=alice.headers)
        assert response.status_code == 422, body
