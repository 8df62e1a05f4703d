"""Cross-tenant probes: bob calls every route with alice's ids, sessions and words.

Nothing of alice's leaks into bob's answers, and alice's data, keys, dead letters and answers are
unchanged afterwards. A route added to the API without a probe here fails the coverage test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from stratamem.api import Services
from stratamem.layers.task_types import L1
from stratamem.pipeline.task import Task
from stratamem.store.failures.records import Failure, FailureKind
from tests.api.conftest import ADMIN, Caller, message

SECRET = "zanzibar"
PRIVATE = "4417"
SESSION = "alice-session"


@dataclass(frozen=True)
class Alice:
    """What alice has, for bob to name."""

    caller: Caller
    turn_ids: list[str]
    memory_ids: list[str]
    scene_ids: list[str]
    dead_id: str
    task_id: str
    ref_id: str
    failure_id: str

    @property
    def ids(self) -> list[str]:
        """Ids that are unique strings (a dead letter's id may be a small number: its task's
        id stands for it)."""
        return [*self.turn_ids, *self.memory_ids, *self.scene_ids, self.task_id, self.ref_id,
                self.failure_id]  # fmt: skip


@dataclass(frozen=True)
class Probe:
    method: str
    path: str
    status: int
    body: dict[str, Any] | None = None
    params: dict[str, Any] | None = None


def probes(alice: Alice) -> list[Probe]:
    """One probe per route, each naming alice's tenant, session, ids or words."""
    a, mem, scene = alice.caller.tenant, alice.memory_ids[0], alice.scene_ids[0]
    words = {"query": SECRET, "sessions": [SESSION]}
    return [
        Probe("POST", "/v1/capture", 200, {"session": SESSION, "messages": [
            message(f"{SECRET} from bob", id="m-1")]}),
        Probe("POST", "/v1/recall", 200, {"query": SECRET, "session": SESSION}),
        Probe("POST", "/v1/search", 200, words),
        Probe("GET", "/v1/whoami", 200),
        Probe("GET", f"/v1/sessions/{SESSION}/turns", 200),
        Probe("POST", "/v1/search/memories", 200, words),
        Probe("POST", "/v1/search/conversations", 200, words),
        Probe("GET", "/v1/stats", 200),
        Probe("GET", "/v1/memories", 200, params={"session": SESSION}),
        Probe("POST", "/v1/memories", 201, {"content": f"User: I prefer my {SECRET} code"}),
        Probe("GET", f"/v1/memories/{mem}", 404),
        Probe("PATCH", f"/v1/memories/{mem}", 404, {"content": "bob rewrote it"}),
        Probe("DELETE", f"/v1/memories/{mem}", 404),
        Probe("GET", f"/v1/memories/{mem}/history", 404),
        Probe("GET", f"/v1/memories/{mem}/sources", 404),
        Probe("GET", f"/v1/memories/{mem}/lineage", 404),
        Probe("POST", f"/v1/memories/{mem}/erase", 404),
        Probe("DELETE", f"/v1/turns/{alice.turn_ids[0]}", 200),  # erases nothing of alice's
        Probe("POST", "/v1/recall/explain", 200, {"query": SECRET, "session": SESSION}),
        Probe("GET", "/v1/sessions", 200),
        Probe("GET", f"/v1/sessions/{SESSION}/status", 200),
        Probe("GET", "/v1/scenes", 200),
        Probe("GET", f"/v1/scenes/{scene}/history", 404),
        Probe("GET", f"/v1/scenes/{scene}/lineage", 404),
        Probe("GET", "/v1/profile", 200),
        Probe("GET", "/v1/profile/history", 200),
        Probe("GET", "/v1/profile/lineage", 404),  # bob has none yet
        Probe("GET", "/v1/export", 200),  # bob's own
        Probe("POST", f"/v1/sessions/{SESSION}/flush", 200, params={"wait": "true"}),
        Probe("GET", "/v1/pipeline", 200),
        Probe("POST", f"/v1/sessions/{SESSION}/reextract", 200),
        Probe("POST", "/v1/reextract", 200),
        Probe("GET", "/v1/dead-letters", 200),
        Probe("POST", f"/v1/dead-letters/{alice.dead_id}/requeue", 404),
        Probe("POST", f"/v1/offload/sessions/{SESSION}/tool-results", 200, {"pairs": [
            {"call_id": "call-1", "tool": "vault", "result": f"bob's {SECRET}"}]}),
        Probe("POST", f"/v1/offload/sessions/{SESSION}/user-messages", 200,
              {"text": f"{SECRET}?", "id": "u-1"}),
        Probe("POST", f"/v1/offload/sessions/{SESSION}/compact", 200, {"budget_tokens": 50,
              "messages": [{"role": "tool", "tool_call_id": "call-1", "content": "x" * 400}]}),
        Probe("GET", f"/v1/offload/sessions/{SESSION}/entries", 200),
        Probe("GET", f"/v1/offload/sessions/{SESSION}/diagrams", 200),
        Probe("GET", f"/v1/offload/refs/{alice.ref_id}", 404),
        Probe("GET", "/v1/failures", 200, params={"session": SESSION}),
        Probe("GET", f"/v1/failures/{alice.failure_id}", 404),
        Probe("POST", f"/v1/failures/{alice.failure_id}/retry", 404),
        Probe("POST", "/v1/failures/retry", 200),  # all of bob's open ones: none of alice's
        Probe("DELETE", f"/v1/sessions/{SESSION}", 200),  # bob's own session of that name
        Probe("GET", "/v1/health", 200),
        Probe("GET", "/v1/ready", 200),
        Probe("GET", "/metrics", 200),
        Probe("POST", "/v1/admin/tenants", 403, {"name": a}),
        Probe("GET", "/v1/admin/tenants", 403),
        Probe("POST", f"/v1/admin/tenants/{a}/keys", 403, {"label": "stolen"}),
        Probe("GET", f"/v1/admin/tenants/{a}/keys", 403),
        Probe("DELETE", f"/v1/admin/tenants/{a}", 403),
        Probe("DELETE", f"/v1/admin/keys/{alice.caller.key_id}", 403),
        Probe("GET", "/v1/admin/pipeline", 403),
        Probe("GET", "/v1/admin/dead-letters", 403),
        Probe("POST", f"/v1/admin/dead-letters/{alice.dead_id}/requeue", 403),
        Probe("DELETE", f"/v1/admin/dead-letters/{alice.dead_id}", 403),
        Probe("GET", "/v1/admin/llm", 403),
        # this service has no upstream; tests/proxy/test_isolation.py probes one that has
        Probe("POST", "/openai/v1/chat/completions", 503, {"model": "m", "messages": [
            message(f"What is my {SECRET} code?")]}),
        Probe("GET", "/openai/v1/models", 503),
        Probe("POST", "/anthropic/v1/messages", 503, {"model": "m", "max_tokens": 9, "messages": [
            message(f"What is my {SECRET} code?")]}),
        Probe("POST", "/anthropic/v1/messages/count_tokens", 503, {"model": "m", "messages": []}),
        Probe("GET", "/anthropic/v1/models", 503),
    ]


def _template(path: str, alice: Alice) -> str:
    """The route template of a probe's path: alice's ids back to parameter names."""
    parameter = {
        ("tenants", alice.caller.tenant): "{tenant}",
        ("keys", alice.caller.key_id): "{key_id}",
        ("memories", alice.memory_ids[0]): "{memory_id}",
        ("scenes", alice.scene_ids[0]): "{scene_id}",
        ("dead-letters", alice.dead_id): "{dead_id}",
        ("sessions", SESSION): "{session}",
        ("refs", alice.ref_id): "{ref_id}",
        ("failures", alice.failure_id): "{failure_id}",
        ("turns", alice.turn_ids[0]): "{turn_id}",
    }
    parts = path.split("/")
    for i in range(1, len(parts)):
        parts[i] = parameter.get((parts[i - 1], parts[i]), parts[i])
    return "/".join(parts)


async def _seed(client: httpx.AsyncClient, services: Services, caller: Caller) -> Alice:
    """Alice's turns, memories, scenes and profile (offline layers), and one dead letter."""
    texts = [f"I prefer my {SECRET} code private, it is {PRIVATE}", "I went hiking with Lena"]
    body = {"session": SESSION, "messages": [message(t, id=f"m-{i}") for i, t in enumerate(texts)]}
    captured = await client.post("/v1/capture", json=body, headers=caller.headers)
    flushed = await client.post(
        f"/v1/sessions/{SESSION}/flush", params={"wait": "true"}, headers=caller.headers
    )
    assert flushed.status_code == 200, flushed.text
    memories = (await client.get("/v1/memories", headers=caller.headers)).json()
    scenes = (await client.get("/v1/scenes", headers=caller.headers)).json()
    backend = services.require_pipeline()
    task = Task(L1, caller.tenant, SESSION)
    await backend.enqueue(task, now=0.0)
    [delivery] = await backend.consume("test", count=1, block_ms=0, now=0.0)
    dead = await backend.dead_letter(delivery, "failed on purpose", now=0.0)
    ref_id = await _seed_offload(client, services, caller)
    quarantined = Failure("task-q", caller.tenant, SESSION, "L1", f"{SECRET} unreadable",
                          (f"the {PRIVATE} private reply",), 0.0, kind=FailureKind.QUARANTINE,
                          turn_ids=(captured.json()["ids"][0],))  # fmt: skip
    services.layers.record_failures([quarantined])
    return Alice(caller, captured.json()["ids"], [m["id"] for m in memories],
                 [s["id"] for s in scenes], dead.id, task.id, ref_id,
                 quarantined.id)  # fmt: skip


async def _seed_offload(client: httpx.AsyncClient, services: Services, caller: Caller) -> str:
    """A tool result of alice's, summarised (offload-l1 run by hand), with its ref."""
    pair = {"call_id": "call-1", "tool": "vault", "result": f"{SECRET} code {PRIVATE}"}
    path = f"/v1/offload/sessions/{SESSION}/tool-results"
    ingested = await client.post(path, json={"pairs": [pair]}, headers=caller.headers)
    assert ingested.status_code == 200, ingested.text
    await services.require_offload().run_l1(caller.tenant, SESSION)
    path = f"/v1/offload/sessions/{SESSION}/entries"
    [entry] = (await client.get(path, headers=caller.headers)).json()
    ref_id: str = entry["ref_id"]
    return ref_id


async def _view(client: httpx.AsyncClient, alice: Alice) -> dict[str, Any]:
    headers, query = alice.caller.headers, {"query": SECRET, "k": 20}
    gets = ["/v1/stats", "/v1/memories", f"/v1/sessions/{SESSION}/turns", "/v1/scenes",
            "/v1/profile", "/v1/profile/history",
            "/v1/pipeline", "/v1/dead-letters", f"/v1/memories/{alice.memory_ids[0]}/history",
            f"/v1/offload/sessions/{SESSION}/entries", f"/v1/offload/sessions/{SESSION}/diagrams",
            f"/v1/offload/refs/{alice.ref_id}", "/v1/failures",
            f"/v1/failures/{alice.failure_id}"]
    view = {path: (await client.get(path, headers=headers)).json() for path in gets}
    for path in ("/v1/search", "/v1/search/conversations", "/v1/search/memories", "/v1/recall"):
        found = (await client.post(path, json=query, headers=headers)).json()
        view[path] = {"hits": _unranked(found["hits"]), "stable": found.get("stable")}
    for path in ("/v1/admin/tenants", f"/v1/admin/tenants/{alice.caller.tenant}/keys"):
        view[path] = (await client.get(path, headers=ADMIN)).json()
    return view


def _unranked(hits: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What was found, without scores and order: full-text ranking uses the document frequencies
    of the whole index, so other tenants' words may reorder a tenant's hits (never add any)."""
    return sorted((h["id"], h["text"]) for h in hits)


async def test_every_route_has_a_probe(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    seeded = await _seed(client, services, alice)
    spec = (await client.get("/openapi.json")).json()
    routes = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    assert routes == {(p.method, _template(p.path, seeded)) for p in probes(seeded)}


async def test_bob_sees_and_changes_nothing_of_alice(
    client: httpx.AsyncClient, services: Services, alice: Caller, bob: Caller
) -> None:
    seeded = await _seed(client, services, alice)
    assert seeded.memory_ids and seeded.scene_ids
    before = await _view(client, seeded)
    assert before["/v1/profile"]["profile"] is not None
    assert before["/v1/dead-letters"] and before["/v1/search/memories"]["hits"]
    assert before["/v1/failures"][0]["raws"] == [f"the {PRIVATE} private reply"]
    for probe in probes(seeded):
        response = await client.request(
            probe.method, probe.path, json=probe.body, params=probe.params, headers=bob.headers
        )
        assert response.status_code == probe.status, (probe, response.text)
        named = f"{probe.path} {probe.body} {probe.params}"  # echoing bob's own words is no leak
        assert [i for i in seeded.ids if i in response.text and i not in named] == [], probe
        assert PRIVATE not in response.text and "private" not in response.text, probe
    assert await _view(client, seeded) == before
    bob_view = (await client.get("/v1/stats", headers=bob.headers)).json()
    assert bob_view["L0"]["records"] == 0  # bob captured one turn, then erased his session


async def test_another_tenants_writes_do_not_reorder_a_tenants_hits(
    client: httpx.AsyncClient, alice: Caller, bob: Caller
) -> None:
    """Full-text statistics are the tenant's own (`store/core/tenant_words.py`): bob's words
    cannot change how alice's weigh."""
    texts = [f"I prefer my {SECRET} code private, it is {PRIVATE}", "I went hiking with Lena"]
    body = {"session": SESSION, "messages": [message(t) for t in texts]}
    await client.post("/v1/capture", json=body, headers=alice.headers)
    await client.post(f"/v1/sessions/{SESSION}/flush?wait=true", headers=alice.headers)
    query = {"query": SECRET, "k": 20}
    before = await client.post("/v1/search/memories", json=query, headers=alice.headers)
    for i in range(5):
        stated = {"content": f"User: I prefer my {SECRET} code {i}"}
        await client.post("/v1/memories", json=stated, headers=bob.headers)
    after = await client.post("/v1/search/memories", json=query, headers=alice.headers)
    assert [h["ranks"] for h in after.json()["hits"]] == [
        h["ranks"] for h in before.json()["hits"]
    ]
