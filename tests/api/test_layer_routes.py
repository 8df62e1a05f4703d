"""Memories, scenes, profile, flush and the caller's pipeline through the REST API."""

from __future__ import annotations

import httpx

from stratamem.api import Services
from stratamem.api.background import Background
from stratamem.layers.task_types import L1, L2
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from tests.api.conftest import ADMIN, Caller, message

TEXTS = [
    "I prefer tea to coffee, always green tea",
    "Yesterday I went hiking with my sister Lena",
    "Please answer me in metric units",
]


async def _capture(client: httpx.AsyncClient, who: Caller, session: str = "s1") -> None:
    body = {"session": session, "messages": [message(t) for t in TEXTS]}
    assert (await client.post("/v1/capture", json=body, headers=who.headers)).is_success


async def test_flush_with_wait_runs_the_layers_and_the_results_are_readable(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    await _capture(client, alice)
    flushed = await client.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)
    assert flushed.status_code == 200
    assert flushed.json()["result"]["l1"][0]["changed"] is True
    memories = (await client.get("/v1/memories", headers=alice.headers)).json()
    assert len(memories) == 3 and all(m["source_turn_ids"] for m in memories)
    one = (await client.get(f"/v1/memories/{memories[0]['id']}", headers=alice.headers)).json()
    assert one == memories[0]
    history = await client.get(f"/v1/memories/{one['id']}/history", headers=alice.headers)
    assert [m["id"] for m in history.json()] == [one["id"]]
    scenes = (await client.get("/v1/scenes", headers=alice.headers)).json()
    assert scenes
    versions = await client.get(f"/v1/scenes/{scenes[0]['id']}/history", headers=alice.headers)
    assert versions.json()[-1]["version"] == scenes[0]["version"]
    profile = (await client.get("/v1/profile", headers=alice.headers)).json()["profile"]
    assert profile is not None and profile["version"] == 1
    assert len((await client.get("/v1/profile/history", headers=alice.headers)).json()) == 1
    found = await client.post("/v1/search/memories", json={"query": "tea"}, headers=alice.headers)
    assert found.json()["hits"][0]["layer"] == "L1"


async def test_filters_and_unknown_records(client: httpx.AsyncClient, alice: Caller) -> None:
    await _capture(client, alice)
    await client.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)
    episodic = await client.get("/v1/memories?type=episodic", headers=alice.headers)
    assert {m["type"] for m in episodic.json()} == {"episodic"}
    other_session = await client.get("/v1/memories?session=s2", headers=alice.headers)
    assert other_session.json() == []
    assert (await client.get("/v1/memories/m_nothing", headers=alice.headers)).status_code == 404
    missing = await client.get("/v1/scenes/sc_nothing/history", headers=alice.headers)
    assert missing.status_code == 404
    assert (await client.get("/v1/profile", headers=alice.headers)).json()["profile"]
    bad = await client.post("/v1/sessions/..%2Fx/flush", headers=alice.headers)
    assert bad.status_code in (404, 422)


async def test_a_queued_flush_is_done_by_the_serve_worker(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    await _capture(client, alice)
    queued = await client.post("/v1/sessions/s1/flush", headers=alice.headers)
    assert queued.status_code == 202
    assert queued.json()["queued"]["type"] == "flush"
    status = (await client.get("/v1/pipeline", headers=alice.headers)).json()
    assert {k: status[k] for k in ("queued", "dead_letters", "pending_turns")} == {
        "queued": 1, "dead_letters": 0, "pending_turns": 3,
    }  # fmt: skip
    assert status["turn_outcomes"]["pending"] == 3 == status["sessions"]["s1"]["pending"]
    background = Background(services, PipelineSettings(), workers=1)
    backend = services.require_pipeline()
    [delivery] = await backend.consume("test", count=1, block_ms=0, now=0.0)
    await background.worker.handle(delivery)  # stepped by hand: no sleeping on a loop
    status = (await client.get("/v1/pipeline", headers=alice.headers)).json()
    assert status["pending_turns"] == 0 and status["turn_outcomes"]["pending"] == 0
    assert len((await client.get("/v1/memories", headers=alice.headers)).json()) == 3


async def test_the_scheduler_of_serve_queues_l1_for_new_turns(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    await _capture(client, alice)
    background = Background(services, PipelineSettings(), workers=1)
    assert background.scheduler is not None
    report = await background.scheduler.tick()
    assert report is not None
    [task] = report.submitted
    assert (task.type, task.tenant, task.session) == (L1, "alice", "s1")
    assert (await client.get("/v1/pipeline", headers=alice.headers)).json()["queued"] == 1
    overview = (await client.get("/v1/admin/pipeline", headers=ADMIN)).json()
    assert overview["scheduler"]["submitted"] == 1 and overview["scheduler"]["in_flight"] == 1
    metrics = (await client.get("/metrics", headers=ADMIN)).text
    assert "stratamem_scheduler_submitted 1\n" in metrics


async def test_dead_letters_are_listed_and_requeued_by_their_tenant(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    backend = services.require_pipeline()
    await backend.enqueue(Task(L1, "alice", "s1"), now=0.0)
    [delivery] = await backend.consume("test", count=1, block_ms=0, now=0.0)
    dead = await backend.dead_letter(delivery, "LLMError: boom", now=0.0)
    listed = (await client.get("/v1/dead-letters", headers=alice.headers)).json()
    assert [(d["id"], d["error"]) for d in listed] == [(dead.id, "LLMError: boom")]
    requeued = await client.post(f"/v1/dead-letters/{dead.id}/requeue", headers=alice.headers)
    assert requeued.status_code == 200 and requeued.json()["attempt"] == 0
    assert (await client.get("/v1/dead-letters", headers=alice.headers)).json() == []
    again = await client.post(f"/v1/dead-letters/{dead.id}/requeue", headers=alice.headers)
    assert again.status_code == 404
    overview = (await client.get("/v1/admin/pipeline", headers=ADMIN)).json()
    assert overview["depth"]["ready"] == 1 and overview["depth"]["dead"] == 0


async def test_a_stated_memory_is_stored_once_and_found(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    body = {"content": "Answer in metric units", "type": "instruction", "priority": 80}
    first = await client.post("/v1/memories", json=body, headers=alice.headers)
    assert first.status_code == 201
    assert (first.json()["mode"], first.json()["priority"]) == ("manual", 80)
    second = await client.post("/v1/memories", json=body, headers=alice.headers)
    assert second.status_code == 200 and second.json() == first.json()
    found = await client.post("/v1/search/memories", json={"query": "units"},
                              headers=alice.headers)
    assert [h["id"] for h in found.json()["hits"]] == [first.json()["id"]]
    injected = {"content": "<stratamem-recall>old</stratamem-recall>"}
    refused = await client.post("/v1/memories", json=injected, headers=alice.headers)
    assert refused.status_code == 422


async def test_a_memory_is_corrected_by_a_new_version_and_forgotten_without_loss(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    made = (await client.post("/v1/memories", json={"content": "Lives in Lyon"},
                              headers=alice.headers)).json()  # fmt: skip
    services.memory.clock.advance(60)  # type: ignore[attr-defined]
    patch = {"content": "Lives in Grenoble", "priority": 70}
    fixed = await client.patch(f"/v1/memories/{made['id']}", json=patch, headers=alice.headers)
    assert fixed.status_code == 200
    assert (fixed.json()["content"], fixed.json()["priority"]) == ("Lives in Grenoble", 70)
    again = await client.patch(f"/v1/memories/{made['id']}", json=patch, headers=alice.headers)
    assert again.status_code == 422  # the old version is superseded: correct the new one
    history = (await client.get(f"/v1/memories/{fixed.json()['id']}/history",
                                headers=alice.headers)).json()  # fmt: skip
    assert [m["content"] for m in history] == ["Lives in Lyon", "Lives in Grenoble"]
    assert history[0]["superseded_by"] == fixed.json()["id"]
    found = await client.post("/v1/search/memories", json={"query": "lives"},
                              headers=alice.headers)  # fmt: skip
    assert [h["text"] for h in found.json()["hits"]] == ["Lives in Grenoble"]
    old = await client.delete(f"/v1/memories/{made['id']}", headers=alice.headers)
    assert old.status_code == 422  # forgetting a superseded version would keep the fact
    assert fixed.json()["id"] in old.json()["error"]["message"]
    gone = await client.delete(f"/v1/memories/{fixed.json()['id']}", headers=alice.headers)
    assert gone.status_code == 200 and gone.json()["valid_to"] is not None
    retried = await client.delete(f"/v1/memories/{fixed.json()['id']}", headers=alice.headers)
    assert retried.status_code == 200 and retried.json() == gone.json()
    found = await client.post("/v1/search/memories", json={"query": "lives"},
                              headers=alice.headers)  # fmt: skip
    assert found.json()["hits"] == []
    assert (await client.get("/v1/memories", headers=alice.headers)).json() == []
    kept = await client.get(f"/v1/memories/{fixed.json()['id']}/history", headers=alice.headers)
    assert len(kept.json()) == 2


async def test_a_tenants_own_dead_letter_is_found_behind_ten_thousand_of_another(
    client: httpx.AsyncClient, services: Services, alice: Caller
) -> None:
    backend = services.require_pipeline()
    batch = 500
    for start in range(0, 10_000, batch):  # tenant bob's failures, first
        for n in range(start, start + batch):
            await backend.enqueue(Task(L2, "bob", f"s{n}"), now=0.0)
        for delivery in await backend.consume("test", count=batch, block_ms=0, now=0.0):
            await backend.dead_letter(delivery, "LLMError: boom", now=0.0)
    await backend.enqueue(Task(L1, "alice", "s1"), now=1.0)
    [delivery] = await backend.consume("test", count=1, block_ms=0, now=1.0)
    mine = await backend.dead_letter(delivery, "LLMError: mine", now=1.0)
    assert mine is not None
    listed = (await client.get("/v1/dead-letters", headers=alice.headers)).json()
    assert [d["id"] for d in listed] == [mine.id]
    status = (await client.get("/v1/pipeline", headers=alice.headers)).json()
    assert status["dead_letters"] == 1
    paged = await client.get(f"/v1/dead-letters?after={mine.id}", headers=alice.headers)
    assert paged.json() == []
    requeued = await client.post(f"/v1/dead-letters/{mine.id}/requeue", headers=alice.headers)
    assert requeued.status_code == 200
    bobs = (await backend.list_dead(limit=1, tenant="bob"))[0].id
    theirs = await client.post(f"/v1/dead-letters/{bobs}/requeue", headers=alice.headers)
    assert theirs.status_code == 404
