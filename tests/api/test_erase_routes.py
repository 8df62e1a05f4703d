"""Forgetting over HTTP: a session of a tenant, or a whole tenant with its keys."""

from __future__ import annotations

import httpx

from stratamem.api import Services
from stratamem.offload.task_types import OFFLOAD_L1_TIMER
from tests.api.conftest import ADMIN, Caller, message


async def _capture(client: httpx.AsyncClient, caller: Caller, session: str, text: str) -> None:
    body = {"session": session, "messages": [message(text, id=f"{session}-1")]}
    assert (await client.post("/v1/capture", json=body, headers=caller.headers)).status_code == 200
    flushed = await client.post(
        f"/v1/sessions/{session}/flush", params={"wait": "true"}, headers=caller.headers
    )
    assert flushed.status_code == 200, flushed.text


async def _found(client: httpx.AsyncClient, caller: Caller, query: str) -> list[str]:
    hits = []
    for kind in ("conversations", "memories"):
        answer = await client.post(f"/v1/search/{kind}", json={"query": query},
                                   headers=caller.headers)  # fmt: skip
        hits += [h["text"] for h in answer.json()["hits"]]
    return hits


async def test_erasing_a_session_forgets_it_and_keeps_the_others(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    await _capture(client, alice, "clinic", "My diagnosis came back: it is shingles.")
    await _capture(client, alice, "trip", "We are planning a trip to Lisbon in May.")
    pair = {"call_id": "c1", "tool": "labs", "result": "shingles panel positive"}
    path = "/v1/offload/sessions/clinic/tool-results"
    assert (await client.post(path, json={"pairs": [pair]}, headers=alice.headers)).is_success
    assert await _found(client, alice, "shingles diagnosis")
    erased = await client.delete("/v1/sessions/clinic", headers=alice.headers)
    assert erased.status_code == 200, erased.text
    body = erased.json()
    assert (body["tenant"], body["session"]) == (alice.tenant, "clinic")
    assert body["erased"]["turns"] == 1 and body["erased"]["memories"] >= 1
    assert body["erased"]["other"] >= 1  # the layer state and the tool result
    assert not [t for t in await _found(client, alice, "shingles diagnosis") if "hingles" in t]
    assert any("Lisbon" in t for t in await _found(client, alice, "Lisbon trip"))
    again = await client.delete("/v1/sessions/clinic", headers=alice.headers)
    assert again.json()["erased"] == {"turns": 0, "memories": 0, "other": 0, "rederived": 0,
                                      "purged_versions": 0, "rebuilt": 0}  # fmt: skip
    bad = await client.delete("/v1/sessions/bad%20name", headers=alice.headers)
    assert bad.status_code == 422


async def test_deleting_a_tenant_revokes_its_keys_and_erases_everything(
    client: httpx.AsyncClient, alice: Caller, bob: Caller
) -> None:
    await _capture(client, alice, "s1", "Alice keeps her bees on the roof.")
    await _capture(client, bob, "s1", "Bob keeps his bees in the garden.")
    deleted = await client.delete(f"/v1/admin/tenants/{alice.tenant}", headers=ADMIN)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["erased"]["turns"] == 1
    assert (await client.get("/v1/stats", headers=alice.headers)).status_code == 401
    tenants = (await client.get("/v1/admin/tenants", headers=ADMIN)).json()
    assert alice.tenant not in [t["name"] for t in tenants]
    missing = await client.delete(f"/v1/admin/tenants/{alice.tenant}", headers=ADMIN)
    assert missing.status_code == 404
    assert any("garden" in t for t in await _found(client, bob, "bees"))
    recreated = await client.post("/v1/admin/tenants", json={"name": alice.tenant}, headers=ADMIN)
    assert recreated.status_code == 201
    issued = await client.post(f"/v1/admin/tenants/{alice.tenant}/keys", json={}, headers=ADMIN)
    headers = {"Authorization": f"Bearer {issued.json()['token']}"}
    stats = (await client.get("/v1/stats", headers=headers)).json()
    assert stats["L0"]["records"] == 0 and stats["L1"]["records"] == 0


async def test_erasing_a_session_disarms_its_offload_timers(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    """A tool result below the batch arms the summaries' timer; the key names the session, so
    forgetting the session must not leave it behind in the pipeline."""
    pair = {"call_id": "c1", "tool": "labs", "result": "shingles panel positive"}
    path = "/v1/offload/sessions/clinic/tool-results"
    assert (await client.post(path, json={"pairs": [pair]}, headers=alice.headers)).is_success
    assert services.pipeline is not None
    key = OFFLOAD_L1_TIMER.key(alice.tenant, "clinic")
    assert await services.pipeline.get_timer(key) is not None
    assert (await client.delete("/v1/sessions/clinic", headers=alice.headers)).status_code == 200
    assert await services.pipeline.get_timer(key) is None


async def test_deleting_a_tenant_disarms_its_sessions_timers(
    client: httpx.AsyncClient, services: Services, alice: Caller, bob: Caller
) -> None:
    """Every session's armed timer names the tenant: deleting the tenant disarms them all, and
    another tenant's timer for a session of the same name stays armed."""
    pair = {"call_id": "c1", "tool": "labs", "result": "shingles panel positive"}
    for caller, session in ((alice, "clinic"), (alice, "trip"), (bob, "clinic")):
        path = f"/v1/offload/sessions/{session}/tool-results"
        assert (await client.post(path, json={"pairs": [pair]}, headers=caller.headers)).is_success
    assert services.pipeline is not None
    keys = [OFFLOAD_L1_TIMER.key(alice.tenant, s) for s in ("clinic", "trip")]
    assert all([await services.pipeline.get_timer(key) is not None for key in keys])
    deleted = await client.delete(f"/v1/admin/tenants/{alice.tenant}", headers=ADMIN)
    assert deleted.status_code == 200, deleted.text
    assert [await services.pipeline.get_timer(key) for key in keys] == [None, None]
    assert await services.pipeline.get_timer(OFFLOAD_L1_TIMER.key(bob.tenant, "clinic"))
