"""The proxy's small parts on their own: server-sent events cut whole, a stream followed, the
proxy's own tool calls kept from the client, messages read, and the blocks placed."""

from __future__ import annotations

import json
from typing import Any

from stratamem.proxy.chat import conversation_session, spoken, text_of, tool_pairs
from stratamem.proxy.dialects import with_blocks
from stratamem.proxy.stream import ChatStream, OwnCalls, SSESplitter, encode_event


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return encode_event({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_events_are_cut_whole_whatever_the_reads() -> None:
    stream = b"data: {\"a\": 1}\n\n: keep-alive\n\ndata: [DONE]\r\n\r\n"
    for size in (1, 3, 7, len(stream)):
        splitter = SSESplitter()
        events = [e for i in range(0, len(stream), size) for e in splitter.feed(stream[i:i + size])]
        assert events == [b'data: {"a": 1}\n\n', b": keep-alive\n\n", b"data: [DONE]\r\n\r\n"]


def test_a_stream_is_complete_only_when_it_ended_properly() -> None:
    stream = ChatStream()
    for event in (chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi "}),
                  chunk({"content": "there"})):  # fmt: skip
        stream.observe(event)
    assert stream.answer == "Hi there" and not stream.complete
    stream.observe(chunk({}, "stop"))
    assert stream.complete and not stream.done
    stream.observe(b"data: [DONE]\n\n")
    assert stream.done
    failed = ChatStream()
    failed.observe(chunk({}, "stop"))
    failed.observe(encode_event({"error": {"message": "overloaded"}}))
    assert not failed.complete


def test_own_calls_are_withheld_and_the_clients_renumbered() -> None:
    own = OwnCalls("read_tool_result")
    stream = ChatStream()
    events = [
        chunk({"tool_calls": [{"index": 0, "id": "r", "function": {"name": "read_tool_result",
                                                                   "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ref_id": "x"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c", "function": {"name": "ls",
                                                                   "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
    ]  # fmt: skip
    forwarded = []
    for event in events:
        stream.observe(event)
        out = own.rewrite(event)
        if out is not None:
            forwarded.append(json.loads(out[6:]))
    calls = [c for f in forwarded for c in f["choices"][0]["delta"].get("tool_calls", [])]
    assert calls == [{"index": 0, "id": "c", "function": {"name": "ls", "arguments": "{}"}}]
    assert forwarded[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert own.own == {0} and not own.only_own(stream)
    assert stream.calls[0].arguments == '{"ref_id": "x"}'


def test_messages_are_read_as_capture_and_offload_take_them() -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"d": 1}'}},
            {"id": "bad id!", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "bad id!", "content": "b.txt"},
        {"role": "user", "content": "<stratamem-recall>old</stratamem-recall>"},
        {"role": "assistant", "content": "Done.", "name": "helper"},
    ]  # fmt: skip
    assert text_of(messages[1]["content"]) == "Look"
    assert spoken(messages) == [{"role": "user", "content": "Look"},
                                {"role": "assistant", "content": "Done.", "name": "helper"}]
    assert tool_pairs(messages) == [{"call_id": "c1", "tool": "ls", "params": {"d": 1},
                                     "result": "a.txt"}]  # fmt: skip
    assert conversation_session(messages) == conversation_session(messages[:2])
    assert conversation_session(messages[:1]) is None


def test_the_blocks_keep_the_clients_prefix_and_go_before_the_users_words() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Q?"}]
    sent = with_blocks(messages, "<stratamem-profile>P</stratamem-profile>",
                       "<stratamem-recall>R</stratamem-recall>")  # fmt: skip
    assert sent[0]["content"] == "Be brief.\n\n<stratamem-profile>P</stratamem-profile>"
    assert sent[1:3] == messages[1:3]
    assert sent[3]["content"] == "<stratamem-recall>R</stratamem-recall>\n\nQ?"
    parts = with_blocks([{"role": "user", "content": [{"type": "text", "text": "Q?"}]}], "S", "R")
    assert parts == [{"role": "system", "content": "S"},
                     {"role": "user", "content": [{"type": "text", "text": "R"},
                                                  {"type": "text", "text": "Q?"}]}]
    assert messages[3]["content"] == "Q?"  # the client's messages are not changed
