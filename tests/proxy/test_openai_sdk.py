"""The `openai` package pointed at the proxy, the scripted server behind it: answers as the
upstream gave them, whole and streamed; the upstream saw the recalled memories and the stable
block; the exchange captured once per message across calls; the recall never captured."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from stratamem.capture import INJECTED_TAGS
from stratamem.domain import Scope
from stratamem.testing import Reply
from tests.proxy.conftest import HTTP, UPSTREAM_KEY, Proxied, assistant, user

HISTORY = [
    {"role": "user", "speaker": "Maya", "content": "Hi! I'm a nurse and I live in Lisbon."},
    {"role": "assistant", "content": "Nice to meet you, Maya."},
    {"role": "user", "speaker": "Maya", "content": "My dog is called Biscuit."},
    {"role": "user", "speaker": "Maya", "content": "Always answer me in short bullet points."},
]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def remembered(proxied: Proxied) -> None:
    """An earlier conversation, distilled by the layers (offline): memories, scenes, profile."""
    memory = proxied.services.memory
    proxied.run(memory.capture(proxied.tenant, "earlier", HISTORY))
    proxied.run(memory.flush(proxied.tenant, "earlier"))


def seen_by_upstream(proxied: Proxied) -> list[dict[str, Any]]:
    return proxied.upstream.calls(path="/v1/chat/completions")[-1].messages


def test_a_call_answers_as_the_upstream_did_with_the_memory_recalled(proxied: Proxied) -> None:
    remembered(proxied)
    proxied.upstream.push(Reply.text("- Biscuit"))
    client = proxied.client()
    answer = client.chat.completions.create(
        model="scripted-chat", messages=[SYSTEM, user("What is my dog called?")],
        extra_headers={"X-Stratamem-Session": "today"},
    )  # fmt: skip
    assert answer.choices[0].message.content == "- Biscuit"
    assert answer.choices[0].finish_reason == "stop"
    system, asked = seen_by_upstream(proxied)
    assert system["role"] == "system"
    assert system["content"].startswith(SYSTEM["content"] + "\n\n<stratamem-profile>")
    assert "User profile:" in system["content"] and "bullet points" in system["content"]
    assert asked["role"] == "user" and asked["content"].startswith("<stratamem-recall>")
    assert "Biscuit" in asked["content"].split("</stratamem-recall>")[0]
    assert asked["content"].endswith("</stratamem-recall>\n\nWhat is my dog called?")
    assert proxied.said("today") == [("user", "What is my dog called?"),
                                     ("assistant", "- Biscuit")]  # fmt: skip


def test_a_streamed_call_passes_the_upstreams_chunks_through(proxied: Proxied) -> None:
    remembered(proxied)
    proxied.upstream.push(Reply.streamed("- Your ", "dog ", "is ", "Biscuit."))
    stream = proxied.client().chat.completions.create(
        model="scripted-chat", messages=[user("What is my dog called?")], stream=True,
        stream_options={"include_usage": True}, extra_headers={"X-Stratamem-Session": "today"},
    )  # fmt: skip
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    assert pieces == ["", "- Your ", "dog ", "is ", "Biscuit.", None]
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    system, asked = seen_by_upstream(proxied)
    assert system["role"] == "system" and "<stratamem-profile>" in system["content"]
    assert "Biscuit" in asked["content"] and asked["content"].endswith("What is my dog called?")
    assert proxied.said("today") == [("user", "What is my dog called?"),
                                     ("assistant", "- Your dog is Biscuit.")]  # fmt: skip


def test_the_sdks_stream_helper_gets_the_whole_answer(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.streamed("Hello ", "there."))
    with proxied.client().chat.completions.stream(
        model="scripted-chat", messages=[user("hi")]
    ) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "Hello there."


def test_every_message_is_captured_once_across_calls_and_the_recall_never(
    proxied: Proxied,
) -> None:
    """A client resends the whole conversation at every call, plain or streamed: each message
    is one turn, in order, and no turn holds recalled text or a recall tag."""
    remembered(proxied)
    client = proxied.client()
    session = {"X-Stratamem-Session": "chat-1"}
    conversation: list[dict[str, Any]] = [SYSTEM]
    replies = [Reply.text("Biscuit."), Reply.streamed("He ", "is ", "a dog."),
               Reply.text("Biscuit."), Reply.streamed("Yes.")]  # fmt: skip
    questions = ["What is my dog called?", "What is he?", "What is my dog called?", "Sure?"]
    for question, reply in zip(questions, replies, strict=True):
        proxied.upstream.push(reply)
        conversation.append(user(question))
        if reply.chunks is None:
            answer = client.chat.completions.create(
                model="m", messages=conversation, extra_headers=session
            ).choices[0].message.content
        else:
            chunks = client.chat.completions.create(
                model="m", messages=conversation, stream=True, extra_headers=session
            )
            answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        conversation.append(assistant(answer))
    expected = [(m["role"], m["content"]) for m in conversation[1:]]
    assert proxied.said("chat-1") == expected
    everything = [t.text for t in proxied.turns("chat-1")]
    assert not any(tag in text for text in everything for tag in INJECTED_TAGS)
    assert not any("nurse" in text or "bullet" in text for text in everything)
    first_call = proxied.upstream.calls(path="/v1/chat/completions")[0].messages
    assert "Biscuit" in first_call[-1]["content"]  # recalled, and not captured
    assert proxied.metric("proxy_captured_messages") == len(expected)


def test_the_recall_leaves_out_the_turns_the_conversation_already_carries(
    proxied: Proxied,
) -> None:
    client = proxied.client()
    session = {"X-Stratamem-Session": "chat-2"}
    proxied.upstream.push(Reply.text("Noted: kites."), Reply.text("Kites."))
    first = [user("I fly kites on Sundays")]
    client.chat.completions.create(model="m", messages=first, extra_headers=session)
    again = [*first, assistant("Noted: kites."), user("What do I fly on Sundays?")]
    client.chat.completions.create(model="m", messages=again, extra_headers=session)
    asked = seen_by_upstream(proxied)[-1]["content"]
    assert "stratamem-recall" not in asked  # its only hits are in the request already
    assert asked == "What do I fly on Sundays?"


def test_the_session_defaults_to_one_per_conversation(proxied: Proxied) -> None:
    client = proxied.client()
    proxied.upstream.handler = lambda request: Reply.text("ok")
    client.chat.completions.create(model="m", messages=[user("Plan my trip to Porto")])
    client.chat.completions.create(model="m", messages=[
        user("Plan my trip to Porto"), assistant("ok"), user("By train")])  # fmt: skip
    client.chat.completions.create(model="m", messages=[user("Fix my bike")])
    names = proxied.services.memory.store.list_sessions(Scope(proxied.tenant))
    assert len(names) == 2 and all(n.startswith("conv-") for n in names)
    trip = next(n for n in names if len(proxied.said(n)) == 4)
    assert proxied.said(trip)[2] == ("user", "By train")


def test_the_upstream_gets_the_proxys_key_never_the_tenants(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.text("ok"))
    proxied.client().chat.completions.create(model="m", messages=[user("hello")])
    headers = proxied.upstream.calls(path="/v1/chat/completions")[-1].headers
    assert headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert not any(proxied.key in value for value in headers.values())


def test_models_are_the_upstreams(proxied: Proxied) -> None:
    listed = proxied.client().models.list()
    assert [m.id for m in listed.data] == ["scripted-chat", "scripted-embed"]


def test_without_a_live_key_the_proxy_refuses_before_the_upstream(proxied: Proxied) -> None:
    stranger = openai.OpenAI(base_url=proxied.base_url, api_key="smk_nobody", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        stranger.chat.completions.create(model="m", messages=[user("hello")])
    assert refused.value.status_code == 401
    assert proxied.upstream.calls(path="/v1/chat/completions") == []


def test_a_session_header_that_is_no_identifier_is_refused(proxied: Proxied) -> None:
    answer = HTTP.post(f"{proxied.base_url}/chat/completions", headers={
        **proxied.headers, "X-Stratamem-Session": "../../etc"},
        json={"model": "m", "messages": [user("hello")]})  # fmt: skip
    assert answer.status_code == 422
    assert "X-Stratamem-Session" in answer.json()["error"]["message"]
    assert proxied.upstream.calls(path="/v1/chat/completions") == []
