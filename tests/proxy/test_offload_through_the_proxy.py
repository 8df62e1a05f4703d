"""Tool calls through the proxy: offloaded after the call, compacted over budget, and
`read_tool_result` answered by the proxy itself when the request lets the model use tools."""

from __future__ import annotations

import json
from typing import Any

from stratamem.domain import Scope
from stratamem.testing import Reply
from tests.proxy.conftest import Proxied, assistant, user

LOG = "\n".join(f"tests/test_login.py::test_case_{i} PASSED" for i in range(150))
SESSION = {"X-Stratamem-Session": "task-1"}
PYTEST_TOOL = {"type": "function", "function": {
    "name": "pytest", "description": "Run the tests.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}  # fmt: skip
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "pytest", "arguments": json.dumps({"path": "tests"})}}  # fmt: skip


def tool_conversation(question: str = "Did everything pass?") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        user("Fix the failing login test"),
        assistant(None, tool_calls=[CALL]),
        {"role": "tool", "tool_call_id": "call_1", "content": LOG},
        user(question),
    ]


def offloaded(proxied: Proxied) -> str:
    """A first call offloads the tool pair; its summary stage runs (offline); the ref."""
    proxied.upstream.push(Reply.text("Looking."))
    proxied.client().chat.completions.create(
        model="m", messages=tool_conversation("Go on"), extra_headers=SESSION
    )
    offload = proxied.services.offload
    assert offload is not None
    proxied.run(offload.run_l1(proxied.tenant, "task-1"))
    [entry] = proxied.run(offload.entries(proxied.tenant, "task-1"))
    return str(entry.ref_id)


def test_tool_calls_are_offloaded_and_the_user_message_marks_a_task(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.text("Looking."), Reply.text("Still looking."))
    client = proxied.client()
    for _ in range(2):  # resent: offloaded once
        client.chat.completions.create(model="m", messages=tool_conversation(),
                                       extra_headers=SESSION)  # fmt: skip
    store = proxied.services.offload.deps.store  # type: ignore[union-attr]
    assert store.pending_pairs(Scope(proxied.tenant), "task-1") == 1
    marks = store.unjudged_marks(Scope(proxied.tenant), "task-1")
    assert [m.text for m in marks] == ["Did everything pass?"]
    proxied.run(proxied.services.offload.run_l1(proxied.tenant, "task-1"))  # type: ignore[union-attr]
    [entry] = proxied.run(proxied.services.offload.entries(proxied.tenant, "task-1"))  # type: ignore[union-attr]
    assert (entry.call_id, entry.tool) == ("call_1", "pytest")
    assert all(LOG not in text for _, text in proxied.said("task-1"))  # results are not turns


def test_over_budget_the_upstream_gets_the_summary_and_the_proxy_reads_the_ref_back(
    proxied: Proxied,
) -> None:
    ref = offloaded(proxied)
    proxied.upstream.push(
        Reply.calling(("call_r", "read_tool_result", {"ref_id": ref})),
        Reply.text("All 150 passed."),
    )
    answer = proxied.client().chat.completions.create(
        model="m", messages=tool_conversation(), tools=[PYTEST_TOOL],  # type: ignore[list-item]
        extra_headers={**SESSION, "X-Stratamem-Budget-Tokens": "1600"},
    )  # fmt: skip
    assert answer.choices[0].message.content == "All 150 passed."
    assert answer.choices[0].message.tool_calls is None
    first, second = proxied.upstream.calls(path="/v1/chat/completions")[-2:]
    result = next(m for m in first.messages if m["role"] == "tool")["content"]
    assert result.startswith("[offloaded result of pytest · ref ") and ref in result
    assert [t["function"]["name"] for t in first.body["tools"]] == ["pytest", "read_tool_result"]
    read = second.messages[-1]
    assert (read["role"], read["tool_call_id"], read["content"]) == ("tool", "call_r", LOG)
    assert proxied.metric("proxy_compactions") == 1
    assert ("assistant", "All 150 passed.") in proxied.said("task-1")


def test_a_streamed_answer_hides_the_proxys_tool_round(proxied: Proxied) -> None:
    ref = offloaded(proxied)
    proxied.upstream.push(
        Reply.calling(("call_r", "read_tool_result", {"ref_id": ref}), content="Let me check. "),
        Reply.streamed("All ", "150 ", "passed."),
    )
    chunks = list(proxied.client().chat.completions.create(
        model="m", messages=tool_conversation(), tools=[PYTEST_TOOL],  # type: ignore[list-item]
        stream=True, extra_headers={**SESSION, "X-Stratamem-Budget-Tokens": "1600"},
    ))  # fmt: skip
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert all(d.tool_calls is None for d in deltas)
    text = "".join(d.content or "" for d in deltas)
    assert text == "Let me check. All 150 passed."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    second = proxied.upstream.calls(path="/v1/chat/completions")[-1]
    assert second.messages[-1]["content"] == LOG
    assert ("assistant", text) in proxied.said("task-1")


def test_the_clients_own_tool_calls_reach_it_beside_the_proxys(proxied: Proxied) -> None:
    ref = offloaded(proxied)
    proxied.upstream.push(Reply.calling(
        ("call_r", "read_tool_result", {"ref_id": ref}), ("call_2", "pytest", {"path": "x"})))
    stream = proxied.client().chat.completions.create(
        model="m", messages=tool_conversation(), tools=[PYTEST_TOOL],  # type: ignore[list-item]
        stream=True, extra_headers={**SESSION, "X-Stratamem-Budget-Tokens": "1600"},
    )  # fmt: skip
    calls = [call for chunk in stream if chunk.choices
             for call in chunk.choices[0].delta.tool_calls or ()]  # fmt: skip
    assert {c.index for c in calls} == {0}
    assert [c.id for c in calls if c.id] == ["call_2"]
    assert "".join(c.function.arguments or "" for c in calls if c.function) == '{"path": "x"}'


def test_without_tools_in_the_request_compaction_offers_none(proxied: Proxied) -> None:
    offloaded(proxied)
    proxied.upstream.push(Reply.text("Yes."))
    proxied.client().chat.completions.create(
        model="m", messages=tool_conversation(),
        extra_headers={**SESSION, "X-Stratamem-Budget-Tokens": "1600"},
    )  # fmt: skip
    sent = proxied.upstream.calls(path="/v1/chat/completions")[-1]
    assert "tools" not in sent.body
    assert "[offloaded result of pytest" in json.dumps(sent.messages)


def test_under_budget_nothing_is_compacted(proxied: Proxied) -> None:
    offloaded(proxied)
    proxied.upstream.push(Reply.text("Yes."))
    proxied.client().chat.completions.create(
        model="m", messages=tool_conversation(), tools=[PYTEST_TOOL],  # type: ignore[list-item]
        extra_headers=SESSION,
    )  # fmt: skip
    sent = proxied.upstream.calls(path="/v1/chat/completions")[-1]
    assert next(m for m in sent.messages if m["role"] == "tool")["content"] == LOG
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["pytest"]
