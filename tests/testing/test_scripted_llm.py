"""The scripted OpenAI-compatible server itself, driven over real HTTP with httpx."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import httpx
import pytest

from stratamem.testing import Reply, ScriptedLLM


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def chat(system: str = "You extract facts.", user: str = "hello") -> dict[str, object]:
    return {
        "model": "scripted-chat",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }


async def test_lists_models(scripted_llm: ScriptedLLM, http: httpx.AsyncClient) -> None:
    response = await http.get(f"{scripted_llm.base_url}/models")
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == ["scripted-chat", "scripted-embed"]


async def test_unknown_route_and_bad_body(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    assert (await http.post(f"{scripted_llm.base_url}/nothing", json={})).status_code == 404
    bad = await http.post(f"{scripted_llm.base_url}/chat/completions", content=b"{not json")
    assert bad.status_code == 400


async def test_replies_in_order_with_completion_shape(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    scripted_llm.push(Reply.json({"a": 1}), Reply.text("plain"))
    url = f"{scripted_llm.base_url}/chat/completions"
    first = (await http.post(url, json=chat())).json()
    second = (await http.post(url, json=chat())).json()
    assert first["choices"][0]["message"] == {"role": "assistant", "content": '{"a": 1}'}
    assert first["model"] == "scripted-chat"
    assert second["choices"][0]["message"]["content"] == "plain"
    assert scripted_llm.pending() == 0


async def test_stage_from_header_then_marker_then_default(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    scripted_llm.handler = lambda request: Reply.text(request.stage)
    url = f"{scripted_llm.base_url}/chat/completions"
    by_header = await http.post(url, json=chat(), headers={"X-Stratamem-Stage": "L2"})
    by_marker = await http.post(url, json=chat(system="[stage: L1] Extract facts."))
    neither = await http.post(url, json=chat())
    contents = [
        r.json()["choices"][0]["message"]["content"] for r in (by_header, by_marker, neither)
    ]
    assert contents == ["L2", "L1", "default"]
    assert [r.stage for r in scripted_llm.calls()] == ["L2", "L1", "default"]


async def test_stage_queue_goes_first(scripted_llm: ScriptedLLM, http: httpx.AsyncClient) -> None:
    scripted_llm.push(Reply.text("general"))
    scripted_llm.push_for("L3", Reply.text("for L3"))
    url = f"{scripted_llm.base_url}/chat/completions"
    l1 = await http.post(url, json=chat(), headers={"X-Stratamem-Stage": "L1"})
    l3 = await http.post(url, json=chat(), headers={"X-Stratamem-Stage": "L3"})
    assert l1.json()["choices"][0]["message"]["content"] == "general"
    assert l3.json()["choices"][0]["message"]["content"] == "for L3"


async def test_stage_handlers_then_the_general_handler(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    scripted_llm.on("L1", lambda request: Reply.json({"turns": len(request.messages)}))
    scripted_llm.on("L2", lambda request: None)  # passes every request on
    scripted_llm.handler = lambda request: Reply.text(f"general {request.stage}")
    url = f"{scripted_llm.base_url}/chat/completions"
    replies = [
        (await http.post(url, json=chat(), headers={"X-Stratamem-Stage": s})).json()
        for s in ("L1", "L2", "L3")
    ]
    contents = [r["choices"][0]["message"]["content"] for r in replies]
    assert contents == ['{"turns": 2}', "general L2", "general L3"]


async def test_unscripted_requests_get_501_and_are_recorded(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    response = await http.post(f"{scripted_llm.base_url}/chat/completions", json=chat())
    assert response.status_code == 501
    assert "no reply scripted" in response.json()["error"]["message"]
    assert len(scripted_llm.unscripted) == 1


async def test_errors_carry_status_and_headers(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    scripted_llm.push(Reply.rate_limited(3), Reply.error(500), Reply.raw("<html>oops</html>"))
    url = f"{scripted_llm.base_url}/chat/completions"
    limited = await http.post(url, json=chat())
    failed = await http.post(url, json=chat())
    raw = await http.post(url, json=chat())
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
    assert failed.status_code == 500
    assert (raw.status_code, raw.text) == (200, "<html>oops</html>")


async def test_can_refuse_response_format(http: httpx.AsyncClient) -> None:
    with ScriptedLLM(accept_response_format=False) as server:
        server.push(Reply.text("ok"))
        body = {**chat(), "response_format": {"type": "json_object"}}
        refused = await http.post(f"{server.base_url}/chat/completions", json=body)
        accepted = await http.post(f"{server.base_url}/chat/completions", json=chat())
    assert refused.status_code == 400
    assert "response_format" in refused.json()["error"]["message"]
    assert accepted.status_code == 200


async def test_counts_calls_and_tokens_per_stage(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    url = f"{scripted_llm.base_url}/chat/completions"
    scripted_llm.push(
        Reply.text("12345678"), Reply.json({}, prompt_tokens=100, completion_tokens=7)
    )
    scripted_llm.push(Reply.error(500))
    body = chat(system="abcd", user="abcdefgh")  # 12 characters → 3 tokens
    first = await http.post(url, json=body, headers={"X-Stratamem-Stage": "L1"})
    await http.post(url, json=body, headers={"X-Stratamem-Stage": "L1"})
    await http.post(url, json=body, headers={"X-Stratamem-Stage": "L2"})
    await http.post(f"{scripted_llm.base_url}/embeddings", json={"input": ["abcdefgh"]})
    assert first.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert scripted_llm.usage() == {
        "L1": {"calls": 2, "prompt_tokens": 103, "completion_tokens": 9},
        "L2": {"calls": 1, "prompt_tokens": 0, "completion_tokens": 0},
        "embeddings": {"calls": 1, "prompt_tokens": 2, "completion_tokens": 0},
    }


async def test_embeddings_are_deterministic_or_scripted(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    url = f"{scripted_llm.base_url}/embeddings"
    one = (await http.post(url, json={"model": "e", "input": ["a", "b"]})).json()
    two = (await http.post(url, json={"model": "e", "input": "a"})).json()
    assert [d["index"] for d in one["data"]] == [0, 1]
    assert len(one["data"][0]["embedding"]) == 64
    assert two["data"][0]["embedding"] == one["data"][0]["embedding"]
    scripted_llm.push_embeddings(Reply.embeddings([[1, 2]]))
    three = (await http.post(url, json={"model": "e", "input": ["a"]})).json()
    assert three["data"][0]["embedding"] == [1.0, 2.0]


async def test_held_reply_waits_for_release(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    scripted_llm.push(Reply.held(Reply.text("after release")))
    request = asyncio.create_task(
        http.post(f"{scripted_llm.base_url}/chat/completions", json=chat())
    )
    assert await scripted_llm.until_held()
    assert not request.done()
    scripted_llm.release()
    response = await request
    assert response.json()["choices"][0]["message"]["content"] == "after release"


async def test_held_reply_sees_its_client_hang_up(
    scripted_llm: ScriptedLLM, http: httpx.AsyncClient
) -> None:
    scripted_llm.push(Reply.held())
    request = asyncio.create_task(
        http.post(f"{scripted_llm.base_url}/chat/completions", json=chat())
    )
    assert await scripted_llm.until_held()
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert await scripted_llm.until_disconnected()


def test_stop_ends_held_replies() -> None:
    server = ScriptedLLM().start()
    server.push(Reply.held())
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(
                httpx.post(f"{server.base_url}/chat/completions", json=chat(), timeout=30)
            )
        except httpx.HTTPError as e:
            outcome.append(e)

    caller = threading.Thread(target=call)
    caller.start()
    assert server.wait_held()
    server.stop()  # must not hang: the held request is let go and its connection closed
    caller.join(timeout=30)
    assert not caller.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], httpx.HTTPError)


def test_port_needs_a_running_server() -> None:
    server = ScriptedLLM()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url
