"""The turn ledger over the service, its layers calling the scripted endpoint: every turn's L1
outcome on `GET /v1/sessions/{session}/turns`, counted per session in `/v1/pipeline` and
`/v1/stats`, and the turns a model found nothing in read again by `POST .../reextract`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratamem.api import ServerSettings, Services, create_app
from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.llm import LLMClient, LLMSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.testing import RecordedRequest, RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply
from tests.api.conftest import ADMIN_KEY, Caller, core_settings, message, new_caller


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


def bad_on_vet(request: RecordedRequest) -> Reply:
    """A model that answers prose when the vet turn is among the new ones, nothing for the
    garden, an unsupported item in place of the sister, and the cooperative memory otherwise."""
    new = request.messages[1]["content"].split("NEW turns", 1)[-1]  # the turns, not a repair
    if "vet" in new:
        return Reply.text("Sure! Your cat will be fine.")
    memories = []
    for item in json.loads(l1_reply(request).content or "{}")["memories"]:
        if "garden" in item["content"]:
            continue
        if "sister" in item["content"]:
            memories.append({**item, "content": "Alice is training for the Berlin marathon."})
            continue
        memories.append(item)
    return Reply.json({"memories": memories})


async def flushed(client: httpx.AsyncClient, alice: Caller, session: str) -> dict[str, Any]:
    answer = await client.post(f"/v1/sessions/{session}/flush?wait=true", headers=alice.headers)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def outcomes(client: httpx.AsyncClient, alice: Caller, session: str) -> list[str]:
    turns = (await client.get(f"/v1/sessions/{session}/turns", headers=alice.headers)).json()
    return [t["l1"]["outcome"] for t in turns]


async def test_every_turn_has_one_visible_outcome(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", bad_on_vet)
    messages = [message("I'm a nurse and I work night shifts"),
                {"role": "assistant", "content": "Night shifts are hard."},
                message("I grow beans in my garden"),
                message("My sister Lena is vegetarian"),
                message("Our cat sees the vet tomorrow")]  # fmt: skip
    body = {"session": "s1", "messages": messages}
    assert (await client.post("/v1/capture", json=body, headers=alice.headers)).is_success
    before = await outcomes(client, alice, "s1")
    assert before == ["pending"] * 5

    await flushed(client, alice, "s1")
    turns = (await client.get("/v1/sessions/s1/turns", headers=alice.headers)).json()
    by_text = {t["text"]: t["l1"] for t in turns}
    nurse = by_text["I'm a nurse and I work night shifts"]
    assert nurse["outcome"] == "extracted" and len(nurse["memory_ids"]) == 1
    memory = await client.get(f"/v1/memories/{nurse['memory_ids'][0]}", headers=alice.headers)
    assert memory.json()["source_turn_ids"] == [turns[0]["id"]]
    assert by_text["Night shifts are hard."]["outcome"] == "nothing_to_remember"
    garden = by_text["I grow beans in my garden"]
    assert garden["outcome"] == "nothing_to_remember" and garden["task_id"] and garden["at"]
    sister = by_text["My sister Lena is vegetarian"]
    assert sister["outcome"] == "refused"
    (record,) = sister["failure_ids"]
    refused = (await client.get(f"/v1/failures/{record}", headers=alice.headers)).json()
    assert refused["kind"] == "refused" and "Berlin marathon" in refused["raws"][0]
    vet = by_text["Our cat sees the vet tomorrow"]
    assert vet["outcome"] == "quarantined"
    quarantine = (await client.get(f"/v1/failures/{vet['failure_ids'][0]}",
                                   headers=alice.headers)).json()  # fmt: skip
    assert quarantine["kind"] == "quarantine" and quarantine["status"] == "open"

    pipeline = (await client.get("/v1/pipeline", headers=alice.headers)).json()
    expected = {"extracted": 1, "nothing_to_remember": 2, "refused": 1, "quarantined": 1,
                "pending": 0, "unrecorded": 0}  # fmt: skip
    assert pipeline["turn_outcomes"] == expected
    assert pipeline["sessions"] == {"s1": expected}
    stats = (await client.get("/v1/stats", headers=alice.headers)).json()
    assert stats["turn_outcomes"] == expected

    more = {"session": "s1", "messages": [message("I prefer kilometres to miles")]}
    assert (await client.post("/v1/capture", json=more, headers=alice.headers)).is_success
    assert (await outcomes(client, alice, "s1"))[-1] == "pending"


async def test_turns_with_nothing_to_remember_are_read_again(
    client: httpx.AsyncClient, alice: Caller, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", lambda request: Reply.json({"memories": []}))  # a model that skips
    messages = [message("I'm a nurse and I work night shifts"), message("I live in Porto")]
    for session in ("s1", "s2"):
        body = {"session": session, "messages": messages}
        assert (await client.post("/v1/capture", json=body, headers=alice.headers)).is_success
        await flushed(client, alice, session)
        assert await outcomes(client, alice, session) == ["nothing_to_remember"] * 2

    install_layer_handlers(scripted_llm)  # the model was changed: it reads them now
    answer = await client.post("/v1/sessions/s1/reextract", headers=alice.headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["turns"] == 2
    assert answer.json()["turn_outcomes"]["extracted"] == 2
    assert await outcomes(client, alice, "s1") == ["extracted"] * 2
    assert await outcomes(client, alice, "s2") == ["nothing_to_remember"] * 2
    again = await client.post("/v1/sessions/s1/reextract", headers=alice.headers)
    assert again.json()["turns"] == 0  # nothing left to read again there

    tenant = await client.post("/v1/reextract", json={"limit": 10}, headers=alice.headers)
    assert tenant.status_code == 200 and tenant.json()["turns"] == 2
    assert await outcomes(client, alice, "s2") == ["extracted"] * 2
    memories = (await client.get("/v1/memories", headers=alice.headers)).json()
    assert len(memories) == 2  # the repeats of s2 were skipped for the memories of s1
    assert json.dumps(memories).count("nurse") == 1
