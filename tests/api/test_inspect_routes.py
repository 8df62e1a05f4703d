"""The routes the web inspector reads beside the others: sessions and their L1 status with its
reasons, a memory's source turns, recall explained by retriever, every tenant's dead letters for
the admin, and LLM calls, tokens and outcomes per stage (JSON and /metrics). Each is scoped to
the caller's tenant like the rest."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from stratamem.api import ServerSettings, Services, create_app
from stratamem.api.routes.inspect import l1_reasons
from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.layers.task_types import L1, L2
from stratamem.llm import LLMClient, LLMSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers
from tests.api.conftest import ADMIN, ADMIN_KEY, Caller, core_settings, message, new_caller


@pytest.fixture
async def world(
    tmp_path: Path, scripted_llm: ScriptedLLM
) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    settings = LLMSettings(base_url=scripted_llm.base_url, model="scripted-chat", max_attempts=1)
    llm = LLMClient(settings, sleep=RecordingSleep())
    memory = AsyncMemory.open(core_settings(tmp_path), clock=ManualClock(), llm=llm)
    backend = SqliteBackend(tmp_path / "data" / "pipeline.db")
    services = Services.over(memory, ServerSettings(admin_key=ADMIN_KEY), backend)
    install_layer_handlers(scripted_llm)
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://stratamem.test") as c:
        yield c, services
    await services.aclose()
    await llm.aclose()


async def _talk(c: httpx.AsyncClient, who: Caller, session: str, *texts: str) -> None:
    body = {"session": session, "messages": [message(t) for t in texts]}
    assert (await c.post("/v1/capture", json=body, headers=who.headers)).is_success


async def test_sessions_and_their_status_say_what_l1_owes(
    world: tuple[httpx.AsyncClient, Services], scripted_llm: ScriptedLLM
) -> None:
    c, services = world
    alice, bob = await new_caller(c, "alice"), await new_caller(c, "bob")
    await _talk(c, alice, "s1", "I adopted a dog called Biscuit", "My sister Lena visits")
    await _talk(c, bob, "b1", "Bob's own words")
    status = (await c.get("/v1/sessions/s1/status", headers=alice.headers)).json()
    assert (status["last_seq"], status["cursor_seq"], status["pending_turns"]) == (2, 0, 2)
    assert status["llm"] == {"mode": "llm", "endpoint": "closed"}
    assert status["reasons"][0] == "2 turn(s) past the cursor (0) wait for L1"
    assert "no L1 task is queued yet" in status["reasons"][1]
    backend = services.require_pipeline()
    await backend.enqueue(Task(L1, "alice", "s1", {}), now=0.0)
    status = (await c.get("/v1/sessions/s1/status", headers=alice.headers)).json()
    assert [t["type"] for t in status["queued"]] == ["L1"]
    assert status["reasons"][1:] == ["L1 task queued or running (attempt 0)"]
    (running,) = await backend.consume("t", count=1, block_ms=0, now=0.0)
    assert await backend.ack(running)
    listed = (await c.get("/v1/sessions", headers=alice.headers)).json()
    assert listed["total"] == 1 and [s["session"] for s in listed["sessions"]] == ["s1"]

    scripted_llm.on("L1", lambda request: Reply.text("not JSON at all"))
    assert (await c.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)).is_success
    await backend.enqueue(Task(L2, "alice", "s1", {}), now=0.0)
    (delivery,) = await backend.consume("t", count=1, block_ms=0, now=0.0)
    await backend.dead_letter(delivery, "every attempt failed", now=0.0)
    status = (await c.get("/v1/sessions/s1/status", headers=alice.headers)).json()
    assert status["pending_turns"] == 0 and len(status["open_failures"]) == 2
    assert [d["error"] for d in status["dead_letters"]] == ["every attempt failed"]
    reasons = " | ".join(status["reasons"])
    assert "L1 has read every captured turn" in reasons
    assert "L2 task failed every retry, a dead letter: every attempt failed" in reasons
    assert "open quarantine failure of L1 on 1 turn(s)" in reasons

    theirs = (await c.get("/v1/sessions/s1/status", headers=bob.headers)).json()
    assert theirs["last_seq"] == 0 and theirs["reasons"] == ["no turn of this session was captured"]
    assert theirs["dead_letters"] == theirs["open_failures"] == []
    assert (await c.get("/v1/sessions?tenant=alice", headers=bob.headers)).status_code == 422


async def test_a_memory_names_its_source_turns_to_its_own_tenant_only(
    world: tuple[httpx.AsyncClient, Services],
) -> None:
    c, _ = world
    alice, bob = await new_caller(c, "alice"), await new_caller(c, "bob")
    await _talk(c, alice, "s1", "I adopted a dog called Biscuit")
    assert (await c.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)).is_success
    (memory,) = (await c.get("/v1/memories", headers=alice.headers)).json()
    found = (await c.get(f"/v1/memories/{memory['id']}/sources", headers=alice.headers)).json()
    assert [t["text"] for t in found["turns"]] == ["I adopted a dog called Biscuit"]
    assert [t["id"] for t in found["turns"]] == memory["source_turn_ids"] and found["missing"] == []
    refused = await c.get(f"/v1/memories/{memory['id']}/sources", headers=bob.headers)
    assert refused.status_code == 404
    stated = await c.post("/v1/memories", json={"content": "Call me Al"}, headers=alice.headers)
    mine = (await c.get(f"/v1/memories/{stated.json()['id']}/sources", headers=alice.headers))
    assert mine.json()["turns"] == [] and mine.json()["missing"] == []


async def test_recall_explained_is_recall_with_each_retrievers_rank_and_score(
    world: tuple[httpx.AsyncClient, Services],
) -> None:
    c, _ = world
    alice = await new_caller(c, "alice")
    await _talk(c, alice, "s1", "I adopted a dog called Biscuit", "Lena visits on Sundays",
                "We hiked the Dolomites")
    assert (await c.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)).is_success
    body = {"query": "who visits on Sundays?"}
    plain = (await c.post("/v1/recall", json=body, headers=alice.headers)).json()
    explained = (await c.post("/v1/recall/explain", json=body, headers=alice.headers)).json()
    assert explained["context"] == plain["context"] and explained["stable"] == plain["stable"]
    assert explained["stats"] == plain["stats"]
    assert [h["id"] for h in explained["hits"]] == [h["id"] for h in plain["hits"]]
    fusion = explained["fusion"]
    for hit in explained["hits"]:
        assert {name: r["rank"] for name, r in hit["retrievers"].items()} == hit["ranks"]
        fused = sum(fusion["weights"][name.split(":")[1]] / (fusion["rrf_k"] + r["rank"])
                    for name, r in hit["retrievers"].items())
        assert hit["score"] == pytest.approx(fused, abs=1e-5)
    top = explained["hits"][0]
    assert "Lena" in top["text"] and top["retrievers"]["L1:bm25"]["score"] > 0


async def test_the_admin_lists_requeues_and_purges_every_tenants_dead_letters(
    world: tuple[httpx.AsyncClient, Services],
) -> None:
    c, services = world
    alice = await new_caller(c, "alice")
    backend = services.require_pipeline()
    for tenant in ("alice", "bob"):
        await backend.enqueue(Task(L2, tenant, "s1", {}), now=0.0)
        (delivery,) = await backend.consume("t", count=1, block_ms=0, now=0.0)
        await backend.dead_letter(delivery, f"{tenant}'s task failed", now=0.0)
    listed = (await c.get("/v1/admin/dead-letters", headers=ADMIN)).json()
    assert sorted(d["tenant"] for d in listed) == ["alice", "bob"]
    assert (await c.get("/v1/admin/dead-letters", headers=alice.headers)).status_code == 403
    first, second = listed
    requeued = await c.post(f"/v1/admin/dead-letters/{first['id']}/requeue", headers=ADMIN)
    assert requeued.json()["tenant"] == first["tenant"] and requeued.json()["attempt"] == 0
    purged = await c.delete(f"/v1/admin/dead-letters/{second['id']}", headers=ADMIN)
    assert purged.json() == {"purged": 1}
    again = await c.delete(f"/v1/admin/dead-letters/{second['id']}", headers=ADMIN)
    assert again.status_code == 404
    assert (await c.get("/v1/admin/dead-letters", headers=ADMIN)).json() == []
    assert (await backend.depth()).ready == 1


async def test_llm_calls_tokens_and_outcomes_per_stage_are_counted(
    world: tuple[httpx.AsyncClient, Services], scripted_llm: ScriptedLLM
) -> None:
    c, _ = world
    alice = await new_caller(c, "alice")
    before = (await c.get("/metrics")).text
    assert "# TYPE stratamem_llm_calls_total counter" in before
    assert "stratamem_llm_calls_total{" not in before
    await _talk(c, alice, "s1", "I adopted a dog called Biscuit")
    assert (await c.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)).is_success
    scripted_llm.on("L1", lambda request: Reply.text("not JSON at all"))
    await _talk(c, alice, "s2", "My sister Lena visits")
    assert (await c.post("/v1/sessions/s2/flush?wait=true", headers=alice.headers)).is_success
    usage = (await c.get("/v1/admin/llm", headers=ADMIN)).json()
    assert usage["mode"] == "llm"
    l1 = usage["stages"]["L1"]
    requests = [r for r in scripted_llm.requests if r.stage == "L1"]
    assert l1["calls"] == len(requests) and l1["prompt_tokens"] > 0 and l1["completion_tokens"] > 0
    assert l1["outcomes"]["accepted"] == 1 and l1["outcomes"]["refused"] >= 1
    metrics = (await c.get("/metrics")).text
    assert f'stratamem_llm_calls_total{{stage="L1"}} {l1["calls"]}' in metrics
    assert f'stratamem_llm_prompt_tokens_total{{stage="L1"}} {l1["prompt_tokens"]}' in metrics
    assert 'stratamem_llm_outcomes_total{stage="L1",outcome="accepted"} 1' in metrics
    assert "alice" not in metrics
    assert (await c.get("/v1/admin/llm", headers=alice.headers)).status_code == 403


def test_an_open_record_says_whether_it_heals_by_itself() -> None:
    def status(**failure: object) -> dict[str, object]:
        record = {"kind": "quarantine", "stage": "L1", "turn_ids": ["t1"], "error": "cut off",
                  "retry_at": None, **failure}  # fmt: skip
        return {"pending_turns": 0, "last_seq": 2, "cursor_seq": 2, "llm": {"endpoint": "closed"},
                "queued": [], "dead_letters": [], "open_failures": [record]}  # fmt: skip

    assert l1_reasons(status(retry_at=1_715_166_000.0))[-1].endswith(
        "(retried by itself at 2024-05-08 11:00:00 UTC, or retry it now)"
    )
    assert l1_reasons(status())[-1].endswith("(retry it)")  # after its last automatic retry
    assert "next success resolves it" in l1_reasons(status(kind="stage"))[-1]
