"""The `anthropic` package pointed at the proxy's `/anthropic` (Anthropic's messages API), the
scripted server behind it: the same memory around the call as for OpenAI's API — the stable
block in `system`, the recall before the user's words, the exchange captured once, tool results
offloaded and compacted with `read_tool_result` answered by the proxy — in Anthropic's shapes."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from stratamem.testing import Reply
from tests.proxy.conftest import UPSTREAM_KEY, Proxied, ProxyFactory
from tests.proxy.test_openai_sdk import remembered

SESSION = {"X-Stratamem-Session": "claude-1"}
LOG = "\n".join(f"tests/test_login.py::test_case_{i} PASSED" for i in range(150))
BASH = {"name": "bash", "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}


def sent(proxied: Proxied) -> Any:
    return proxied.upstream.calls(path="/v1/messages")[-1]


def test_a_message_has_the_memory_around_it_and_is_captured(proxied: Proxied) -> None:
    remembered(proxied)
    proxied.upstream.push(Reply.text("- Biscuit"))
    answer = proxied.anthropic().messages.create(
        model="claude-x", max_tokens=100, system="You are terse.",
        messages=[{"role": "user", "content": "What is my dog called?"}], extra_headers=SESSION,
    )  # fmt: skip
    assert [b.text for b in answer.content if b.type == "text"] == ["- Biscuit"]
    request = sent(proxied)
    assert request.body["system"].startswith("You are terse.\n\n<stratamem-profile>")
    asked = request.messages[-1]["content"]
    assert asked.startswith("<stratamem-recall>") and "Biscuit" in asked
    assert asked.endswith("What is my dog called?")
    assert request.headers["x-api-key"] == UPSTREAM_KEY and proxied.key not in str(request.headers)
    assert request.headers["anthropic-version"]
    assert proxied.said("claude-1") == [("user", "What is my dog called?"),
                                        ("assistant", "- Biscuit")]  # fmt: skip


def test_a_streamed_message_passes_through_and_is_captured_once(proxied: Proxied) -> None:
    client = proxied.anthropic()
    proxied.upstream.push(Reply.streamed("Hello ", "Maya."), Reply.streamed("Bye."))
    conversation: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": "Hi, I am Maya", "cache_control": {"type": "ephemeral"}}]}]
    for expected in (["Hello ", "Maya."], ["Bye."]):
        with client.messages.stream(model="claude-x", max_tokens=100, messages=conversation,
                                    extra_headers=SESSION) as stream:  # fmt: skip
            assert list(stream.text_stream) == expected
            final = stream.get_final_message()
        assert final.stop_reason == "end_turn"
        conversation += [{"role": "assistant", "content": "".join(expected)},
                         {"role": "user", "content": "Goodbye"}]  # fmt: skip
    assert proxied.said("claude-1") == [("user", "Hi, I am Maya"), ("assistant", "Hello Maya."),
                                        ("user", "Goodbye"), ("assistant", "Bye.")]  # fmt: skip
    first = proxied.upstream.calls(path="/v1/messages")[0].messages[0]["content"]
    assert first[-1] == {"type": "text", "text": "Hi, I am Maya",
                         "cache_control": {"type": "ephemeral"}}  # the client's block as it was


def _tool_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Fix the failing login test"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Running the tests."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "pytest"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": LOG},
            {"type": "text", "text": "Did everything pass?"}]},
    ]  # fmt: skip


def _offloaded(proxied: Proxied) -> str:
    proxied.upstream.push(Reply.text("Looking."))
    proxied.anthropic().messages.create(model="claude-x", max_tokens=100,
                                        messages=_tool_conversation(), extra_headers=SESSION)
    offload = proxied.services.offload
    assert offload is not None
    proxied.run(offload.run_l1(proxied.tenant, "claude-1"))
    [entry] = proxied.run(offload.entries(proxied.tenant, "claude-1"))
    assert (entry.call_id, entry.tool) == ("toolu_1", "bash")
    return str(entry.ref_id)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_over_budget_the_result_is_compacted_and_read_back_by_the_proxy(
    proxied: Proxied, stream: bool
) -> None:
    ref = _offloaded(proxied)
    proxied.upstream.push(
        Reply.calling(("toolu_r", "read_tool_result", {"ref_id": ref}), content="Checking. "),
        Reply.streamed("All ", "150 ", "passed."),
    )
    budget = {**SESSION, "X-Stratamem-Budget-Tokens": "1600"}
    client = proxied.anthropic()
    arguments: dict[str, Any] = {"model": "claude-x", "max_tokens": 100, "tools": [BASH],
                                 "messages": _tool_conversation(), "extra_headers": budget}
    if stream:
        with client.messages.stream(**arguments) as streamed:
            final = streamed.get_final_message()
    else:
        final = client.messages.create(**arguments)
    assert [b.type for b in final.content] == (["text", "text"] if stream else ["text"])
    assert "".join(b.text for b in final.content if b.type == "text") == (
        "Checking. All 150 passed." if stream else "All 150 passed.")
    assert final.stop_reason == "end_turn"
    first, second = proxied.upstream.calls(path="/v1/messages")[-2:]
    result = first.messages[-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"].startswith("[offloaded result")
    assert [t["name"] for t in first.body["tools"]] == ["bash", "read_tool_result"]
    answered = second.messages[-1]["content"][0]
    assert (answered["tool_use_id"], answered["content"]) == ("toolu_r", LOG)


def test_an_upstream_error_keeps_its_status_and_shape(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.anthropic_error(400, "max_tokens: too large"))
    with pytest.raises(anthropic.BadRequestError) as raised:
        proxied.anthropic().messages.create(model="claude-x", max_tokens=10,
                                            messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 400
    assert raised.value.body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: too large"}}  # fmt: skip


def test_without_an_anthropic_upstream_the_proxy_says_what_to_set(
    make_proxied: ProxyFactory,
) -> None:
    proxied = make_proxied(anthropic_upstream=None)
    with pytest.raises(anthropic.APIStatusError) as raised:
        proxied.anthropic().messages.create(model="claude-x", max_tokens=10,
                                            messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 503
    assert "STRATAMEM_PROXY_ANTHROPIC_UPSTREAM" in str(raised.value.body)


def test_a_wrong_key_is_refused(proxied: Proxied) -> None:
    stranger = anthropic.Anthropic(base_url=f"{proxied.url}/anthropic", api_key="smk_nobody",
                                   max_retries=0)  # fmt: skip
    with pytest.raises(anthropic.AuthenticationError):
        stranger.messages.create(model="claude-x", max_tokens=10,
                                 messages=[{"role": "user", "content": "hi"}])
    assert proxied.upstream.calls(path="/v1/messages") == []
