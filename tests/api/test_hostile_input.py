"""Hostile input is refused at the edge in the error shape, and a bad stored record cannot fail
a whole tenant: far timestamps, lone surrogates, deep nesting, NFC/NFD, unexpected exceptions."""

from __future__ import annotations

import unicodedata
from typing import Any

import httpx
import pytest

from stratamem.api import Services
from stratamem.domain import Role, Scope, Turn
from tests.api.conftest import Caller, message

MIN_TIMESTAMP_S = -2_208_988_800.0  # 1900-01-01T00:00:00Z, the documented range
MAX_TIMESTAMP_S = 7_258_118_400.0  # 2200-01-01T00:00:00Z
FAR_TIMES: list[Any] = [
    "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00Z", 1e15, -1e18, 1.79e308,
    MAX_TIMESTAMP_S + 1, MIN_TIMESTAMP_S - 1,
]  # fmt: skip


def assert_error_shape(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "message"}


async def post_raw(client: httpx.AsyncClient, path: str, raw: str, who: Caller) -> httpx.Response:
    """A body sent as written: JSON escapes such as a lone `\\ud800` reach the server intact."""
    headers = {**who.headers, "Content-Type": "application/json"}
    return await client.post(path, content=raw.encode(), headers=headers)


async def turn_count(client: httpx.AsyncClient, who: Caller) -> int:
    stats = (await client.get("/v1/stats", headers=who.headers)).json()
    return int(stats["L0"]["records"])


@pytest.mark.parametrize("when", FAR_TIMES)
async def test_a_time_outside_the_range_is_refused_where_it_enters(
    client: httpx.AsyncClient, alice: Caller, when: Any
) -> None:
    captured = await client.post(
        "/v1/capture",
        json={"session": "s1", "messages": [message("hello", timestamp=when)]},
        headers=alice.headers,
    )
    assert_error_shape(captured, 422)
    pair = {"call_id": "c1", "tool": "t", "result": "r", "timestamp": when}
    if not isinstance(when, str):
        tools = await client.post(
            "/v1/offload/sessions/s1/tool-results", json={"pairs": [pair]}, headers=alice.headers
        )
        assert_error_shape(tools, 422)
        said = await client.post(
            "/v1/offload/sessions/s1/user-messages",
            json={"text": "hi", "timestamp": when},
            headers=alice.headers,
        )
        assert_error_shape(said, 422)
    assert await turn_count(client, alice) == 0
    recalled = await client.post("/v1/recall", json={"query": "hello"}, headers=alice.headers)
    assert recalled.status_code == 200


async def test_the_ends_of_the_range_are_accepted(client: httpx.AsyncClient, alice: Caller) -> None:
    ends = ["1900-01-01T00:00:00Z", MIN_TIMESTAMP_S, MAX_TIMESTAMP_S, "2199-12-31T23:59:59Z"]
    body = {"session": "s1", "messages": [message(f"edge {i}", timestamp=t) for i, t in
                                          enumerate(ends)]}  # fmt: skip
    assert (await client.post("/v1/capture", json=body, headers=alice.headers)).status_code == 200
    assert await turn_count(client, alice) == len(ends)


async def test_a_stored_record_with_an_impossible_time_fails_nothing(
    client: httpx.AsyncClient, alice: Caller, services: Services
) -> None:
    """Written by another program (or before the check): recall, flush and the layers go on."""
    bad = Turn(id="t_far", tenant="alice", session="s1", role=Role.USER,
               text="I adopted a dog called Biscuit yesterday", timestamp=1e15)  # fmt: skip
    services.memory.store.add_turns(Scope("alice"), [bad])
    recalled = await client.post("/v1/recall", json={"query": "dog"}, headers=alice.headers)
    assert recalled.status_code == 200, recalled.text
    assert "Biscuit" in recalled.json()["context"]
    flushed = await client.post("/v1/sessions/s1/flush?wait=true", headers=alice.headers)
    assert flushed.is_success, flushed.text
    pipeline = (await client.get("/v1/pipeline", headers=alice.headers)).json()
    assert pipeline["pending_turns"] == 0
    assert pipeline["dead_letters"] == 0
    turns = await client.get("/v1/sessions/s1/turns", headers=alice.headers)
    assert turns.status_code == 200
    assert turns.json()[0]["timestamp"] == 1e15


CAPTURE_WITH = '{"session": "s1", "messages": [{"role": "user", "content": %s, "metadata": %s}]}'
SURROGATE_BODIES = [
    ("/v1/capture", CAPTURE_WITH % ('"a\\ud800b"', "{}")),
    ("/v1/capture", CAPTURE_WITH % ('"fine"', '{"k": "\\udfff"}')),
    ("/v1/capture", CAPTURE_WITH % ('"fine"', '{"\\ud800": 1}')),
    ("/v1/offload/sessions/s1/tool-results",
     '{"pairs": [{"call_id": "c1", "tool": "t", "result": "x\\ud800"}]}'),
    ("/v1/offload/sessions/s1/tool-results",
     '{"pairs": [{"call_id": "c1", "tool": "t", "result": "x", "params": {"q": "\\ud800"}}]}'),
    ("/v1/offload/sessions/s1/compact",
     '{"budget_tokens": 100, "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ("/v1/offload/sessions/s1/user-messages", '{"text": "hi \\udbff"}'),
    ("/v1/memories", '{"content": "likes \\ud800 tea"}'),
    ("/v1/recall", '{"query": "dog \\ud800"}'),
]  # fmt: skip


@pytest.mark.parametrize(("path", "raw"), SURROGATE_BODIES)
async def test_a_lone_surrogate_is_refused_in_the_error_shape(
    client: httpx.AsyncClient, alice: Caller, path: str, raw: str
) -> None:
    response = await post_raw(client, path, raw, alice)
    assert_error_shape(response, 422)
    assert "surrogate" in response.json()["error"]["message"]
    assert await turn_count(client, alice) == 0


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


async def test_deep_nesting_is_refused_and_shallow_nesting_accepted(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    deep = {"role": "user", "content": [{"type": "text", "text": "x", "extra": nested(300)}]}
    compacted = await client.post(
        "/v1/offload/sessions/s1/compact",
        json={"budget_tokens": 100, "messages": [deep]},
        headers=alice.headers,
    )
    assert_error_shape(compacted, 422)
    assert "nested" in compacted.json()["error"]["message"]
    for depth, status in ((40, 422), (20, 200)):
        body = {"session": "s1", "messages": [message("x", metadata={"n": nested(depth)})]}
        response = await client.post("/v1/capture", json=body, headers=alice.headers)
        assert response.status_code == status, (depth, response.text)


async def test_the_nfc_and_nfd_forms_of_one_text_are_one_turn(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    text = "Zoë visited the café in Köln"
    forms = [unicodedata.normalize(form, text) for form in ("NFC", "NFD")]
    assert forms[0] != forms[1]
    results = []
    for form in forms:
        body = {"session": "s1", "messages": [message(form, timestamp=1_700_000_000)]}
        results.append((await client.post("/v1/capture", json=body, headers=alice.headers)).json())
    assert results[1]["duplicates"] == results[0]["stored"]
    turns = (await client.get("/v1/sessions/s1/turns", headers=alice.headers)).json()
    assert [t["text"] for t in turns] == [forms[0]]
    memories = [
        await client.post("/v1/memories", json={"content": form}, headers=alice.headers)
        for form in forms
    ]
    assert memories[0].json()["id"] == memories[1].json()["id"]


async def test_nul_and_direction_marks_are_kept_verbatim(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    text = "a\u0000b \u202eevil\u202c \u200fRTL"
    body = {"session": "s1", "messages": [message(text)]}
    assert (await client.post("/v1/capture", json=body, headers=alice.headers)).status_code == 200
    turns = (await client.get("/v1/sessions/s1/turns", headers=alice.headers)).json()
    assert [t["text"] for t in turns] == [text]
    found = await client.post("/v1/recall", json={"query": "evil RTL"}, headers=alice.headers)
    assert found.status_code == 200


async def test_openapi_query_limit_is_the_servers(client: httpx.AsyncClient, alice: Caller) -> None:
    spec = (await client.get("/openapi.json")).json()
    limits = {
        schema["properties"]["query"]["maxLength"]
        for name, schema in spec["components"]["schemas"].items()
        if "query" in schema.get("properties", {})
    }
    assert limits == {4000}
    for length, status in ((4000, 200), (4001, 422)):
        response = await client.post(
            "/v1/recall", json={"query": "q" * length}, headers=alice.headers
        )
        assert response.status_code == status


async def test_a_forgotten_memory_stated_again_is_current_again(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    """Issue 13, item 8 (fixed on main before this test): stating it again makes it current."""
    first = (await client.post("/v1/memories", json={"content": "Likes tea"},
                               headers=alice.headers)).json()  # fmt: skip
    forgotten = await client.delete(f"/v1/memories/{first['id']}", headers=alice.headers)
    assert forgotten.json()["valid_to"] is not None
    again = await client.post("/v1/memories", json={"content": "Likes tea"}, headers=alice.headers)
    assert again.json()["valid_to"] is None
    current = (await client.get("/v1/memories", headers=alice.headers)).json()
    assert [m["content"] for m in current] == ["Likes tea"]



async def test_a_turn_cursor_beyond_64_bits_is_refused_not_a_server_error(
    client: httpx.AsyncClient, alice: Caller
) -> None:
    """Found by the fuzz suite: `after` above 2**63 overflowed SQLite's integer and answered 500."""
    for after in (2**63, 14399916511942643712, 10**30):
        refused = await client.get(f"/v1/sessions/s1/turns?after={after}", headers=alice.headers)
        assert_error_shape(refused, 422)
    last = await client.get(f"/v1/sessions/s1/turns?after={2**63 - 1}", headers=alice.headers)
    assert last.status_code == 200 and last.json() == []
