"""`/v1/failures`: a tenant's failure records with their raw replies, paged and filtered, and
the retry of a quarantined turn, over a service whose layers call the scripted endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from stratamem.api import ServerSettings, Services, create_app
from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.llm import LLMClient, LLMSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply
from tests.api.conftest import ADMIN_KEY, Caller, core_settings, message, new_caller

PROSE = "Sure! Here is what I think about your day."


@pytest.fixture
async def client(tmp_path: Path, scripted_llm: ScriptedLLM) -> AsyncIterator[httpx.AsyncClient]:
    settings = LLMSettings(base_url=scripted_llm.base_url, model="scripted-chat", max_attempts=1)
    llm = LLMClient(settings, sleep=RecordingSleep())
    memory = AsyncMemory.open(core_settings(tmp_path), clock=ManualClock(), llm=llm)
    backend = SqliteBackend(tmp_path / "data" / "pipeline.db")
    services = Services.over(memory, ServerSettings(admin_key=ADMIN_KEY), backend)
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://stratamem.test") as c:
        yield c
    await services.aclose()
    await llm.aclose()


@pytest.fixture
async def alice(client: httpx.AsyncClient) -> Caller:
    return await new_caller(client, "alice")


async def quarantined_session(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    """Two turns the model cannot read: both quarantined, the batch split once."""
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", lambda request: Reply.text(PROSE))
    body = {"session": "s1", "messages": [message("I grow beans in my garden"),
                                          message("My sister Lena visits on Sundays")]}  # fmt: skip
    assert (await client.post("/v1/capture", json=body, headers=alice.headers)).is_success
    flushed = await client.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)
    assert flushed.status_code == 200, flushed.text
    l1 = flushed.json()["result"]["l1"][0]
    assert l1["counts"]["quarantined"] == 2 and l1["counts"]["covered"] == 0


async def test_records_are_listed_filtered_paged_and_shown(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    await quarantined_session(client, alice, scripted_llm)
    get = alice.headers
    listed = (await client.get("/v1/failures", headers=get)).json()
    assert [f["kind"] for f in listed] == ["batch", "quarantine", "quarantine"]  # newest first
    assert all(f["raws"] == [PROSE, PROSE] for f in listed)
    open_ones = await client.get("/v1/failures?kind=quarantine&status=open&stage=L1", headers=get)
    assert len(open_ones.json()) == 2
    page = await client.get("/v1/failures?limit=2&offset=2", headers=get)
    assert [f["id"] for f in page.json()] == [listed[2]["id"]]
    assert (await client.get("/v1/failures?session=s2", headers=get)).json() == []
    one = await client.get(f"/v1/failures/{listed[1]['id']}", headers=get)
    assert one.json() == listed[1] and len(one.json()["turn_ids"]) == 1
    assert len(listed[0]["turn_ids"]) == 2  # the batch that was split
    assert (await client.get("/v1/failures/f_nothing", headers=get)).status_code == 404
    assert (await client.get("/v1/failures?kind=oops", headers=get)).status_code == 422
    assert (await client.get("/v1/failures?tenant=bob", headers=get)).status_code == 422


async def test_a_retry_covers_a_quarantined_turn(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    await quarantined_session(client, alice, scripted_llm)
    scripted_llm.on("L1", l1_reply)  # the endpoint reads it now
    quarantines = (await client.get("/v1/failures?kind=quarantine", headers=alice.headers)).json()
    retried = await client.post(f"/v1/failures/{quarantines[0]['id']}/retry", headers=alice.headers)
    assert retried.status_code == 200, retried.text
    body = retried.json()
    assert body["failure"]["status"] == "resolved" and body["failure"]["attempts"] == 2
    assert body["result"]["changed"] is True
    memories = (await client.get("/v1/memories", headers=alice.headers)).json()
    assert [m["source_turn_ids"] for m in memories] == [quarantines[0]["turn_ids"]]

    again = await client.post(f"/v1/failures/{quarantines[0]['id']}/retry", headers=alice.headers)
    assert again.status_code == 409
    [batch] = (await client.get("/v1/failures?kind=batch", headers=alice.headers)).json()
    noted = await client.post(f"/v1/failures/{batch['id']}/retry", headers=alice.headers)
    assert noted.status_code == 422 and "nothing to retry" in noted.text


async def test_a_retry_that_fails_answers_its_error_and_keeps_the_record(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    await quarantined_session(client, alice, scripted_llm)
    [first, _] = (await client.get("/v1/failures?kind=quarantine", headers=alice.headers)).json()
    failed = await client.post(f"/v1/failures/{first['id']}/retry", headers=alice.headers)
    assert failed.status_code == 502 and failed.json()["error"]["type"] == "layer_failed"
    after = (await client.get(f"/v1/failures/{first['id']}", headers=alice.headers)).json()
    assert after["status"] == "open" and after["attempts"] == 2 and len(after["raws"]) == 4


async def test_a_bulk_retry_covers_every_quarantined_turn_of_a_session(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    await quarantined_session(client, alice, scripted_llm)
    quarantines = (await client.get("/v1/failures?kind=quarantine", headers=alice.headers)).json()
    assert all(q["retry_at"] is not None and q["auto_retries"] == 0 for q in quarantines)
    nothing = await client.post("/v1/failures/retry?session=s2", headers=alice.headers)
    assert nothing.json() == {"retried": 0, "resolved": [], "still_open": [], "skipped": [],
                              "failed": {}}  # fmt: skip
    failing = await client.post("/v1/failures/retry?session=s1", headers=alice.headers)
    assert failing.status_code == 200, failing.text
    assert sorted(failing.json()["failed"]) == sorted(q["id"] for q in quarantines)
    assert "StageOutputRejected" in next(iter(failing.json()["failed"].values()))

    scripted_llm.on("L1", l1_reply)  # the endpoint reads them now
    retried = await client.post("/v1/failures/retry?kind=quarantine", headers=alice.headers)
    assert retried.status_code == 200, retried.text
    assert sorted(retried.json()["resolved"]) == sorted(q["id"] for q in quarantines)
    memories = (await client.get("/v1/memories", headers=alice.headers)).json()
    assert len(memories) == 2
    noted = await client.post("/v1/failures/retry?kind=batch", headers=alice.headers)
    assert noted.status_code == 422 and "nothing to retry" in noted.text
