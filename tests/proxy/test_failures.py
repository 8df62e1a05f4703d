"""What goes wrong: the upstream's errors reach the client in OpenAI's shape with their status;
memory's own failures (a slow or failing recall, a refused capture, a client that goes away)
never block the call and never half-capture an exchange."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import openai
import pytest

from stratamem.testing import Reply, ScriptedLLM
from tests.proxy.conftest import HTTP, UPSTREAM_KEY, Proxied, ProxyFactory, assistant, user

SESSION = {"X-Stratamem-Session": "s1"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("status", "error"),
    [(400, openai.BadRequestError), (404, openai.NotFoundError),
     (500, openai.InternalServerError), (503, openai.APIStatusError)],
)  # fmt: skip
def test_an_upstream_error_reaches_the_client_with_its_status_and_shape(
    proxied: Proxied, status: int, error: type[openai.APIStatusError], stream: bool
) -> None:
    proxied.upstream.push(Reply.error(status, "the model 'm' is unknown"))
    with pytest.raises(error) as raised:
        proxied.client().chat.completions.create(
            model="m", messages=[user("hello")], stream=stream, extra_headers=SESSION
        )
    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["message"] == "the model 'm' is unknown"
    assert proxied.said("s1") == []  # no answer: nothing captured


def test_an_upstream_error_that_echoes_the_proxys_key_has_it_cut_out(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.error(401, f"Incorrect API key provided: {UPSTREAM_KEY}"))
    with pytest.raises(openai.AuthenticationError) as raised:
        proxied.client().chat.completions.create(model="m", messages=[user("hello")])
    assert UPSTREAM_KEY not in str(raised.value.body)
    assert raised.value.status_code == 401


def test_a_rate_limit_passes_its_retry_after(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.rate_limited(7))
    with pytest.raises(openai.RateLimitError) as raised:
        proxied.client().chat.completions.create(model="m", messages=[user("hello")])
    assert raised.value.response.headers["retry-after"] == "7"


def test_an_error_that_is_not_json_is_wrapped_in_the_shape(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.raw("<html>Bad Gateway</html>", status=502))
    answer = HTTP.post(f"{proxied.base_url}/chat/completions", headers=proxied.headers,
                        json={"model": "m", "messages": [user("hello")]})  # fmt: skip
    assert answer.status_code == 502
    assert answer.json()["error"] == {"message": "<html>Bad Gateway</html>",
                                      "type": "upstream_error", "param": None,
                                      "code": "upstream_error"}  # fmt: skip


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_upstream_is_a_502_naming_no_address(make_proxied: ProxyFactory) -> None:
    port = _closed_port()
    proxied = make_proxied(upstream=f"http://user:secret@127.0.0.1:{port}/v1")
    with pytest.raises(openai.APIStatusError) as raised:
        proxied.client().chat.completions.create(model="m", messages=[user("hello")])
    assert raised.value.status_code == 502
    assert raised.value.body["type"] == "upstream_unreachable"  # type: ignore[index]
    message = raised.value.body["message"]  # type: ignore[index]
    assert message == "the upstream could not be reached (ConnectError)"


def test_without_an_upstream_the_proxy_says_what_to_set(make_proxied: ProxyFactory) -> None:
    proxied = make_proxied(upstream=None)
    with pytest.raises(openai.APIStatusError) as raised:
        proxied.client().chat.completions.create(model="m", messages=[user("hello")])
    assert raised.value.status_code == 503
    assert "STRATAMEM_PROXY_UPSTREAM" in raised.value.body["message"]  # type: ignore[index]


@pytest.fixture
def embeddings() -> Iterator[ScriptedLLM]:
    """A second scripted server, serving the memory's embeddings."""
    with ScriptedLLM() as server:
        yield server


def test_a_recall_slower_than_its_bound_is_skipped(
    make_proxied: ProxyFactory, embeddings: ScriptedLLM
) -> None:
    core = {"embedder": "openai:scripted-embed", "embed_base_url": embeddings.base_url,
            "embed_dim": 64}  # fmt: skip
    proxied = make_proxied(core=core, recall_timeout_s=0.2)
    embeddings.push_embeddings(Reply.held())  # the recall's query embedding never comes
    proxied.upstream.push(Reply.text("Hello."))
    answer = proxied.client().chat.completions.create(
        model="m", messages=[user("What is my dog called?")], extra_headers=SESSION
    )
    assert answer.choices[0].message.content == "Hello."
    sent = proxied.upstream.calls(path="/v1/chat/completions")[-1].messages
    assert sent == [user("What is my dog called?")]  # forwarded without memory
    assert proxied.metric("proxy_recall_timeouts") == 1
    assert proxied.said("s1") == [("user", "What is my dog called?"), ("assistant", "Hello.")]


def test_a_failing_recall_and_an_uncapturable_message_never_block_the_call(
    proxied: Proxied,
) -> None:
    """Text that is not Unicode (a lone surrogate, which JSON can carry) fails recall and
    capture's checks: the call still goes through, and the other messages are captured."""
    proxied.upstream.push(Reply.text("Hi."))
    messages = [user("I am Maya"), assistant("Hello Maya."), user("oops \ud800")]
    body = json.dumps({"model": "m", "messages": messages})  # escaped: JSON can carry it
    answer = HTTP.post(f"{proxied.base_url}/chat/completions", content=body,
                        headers={**proxied.headers, **SESSION,
                                 "Content-Type": "application/json"})  # fmt: skip
    assert answer.json()["choices"][0]["message"]["content"] == "Hi."
    assert proxied.upstream.calls(path="/v1/chat/completions")[-1].messages == messages
    assert proxied.metric("proxy_recall_failures") == 1
    assert proxied.metric("proxy_uncaptured_messages") == 1
    assert proxied.said("s1") == [("user", "I am Maya"), ("assistant", "Hello Maya."),
                                  ("assistant", "Hi.")]  # fmt: skip


def test_a_refused_capture_is_made_good_by_the_next_call(make_proxied: ProxyFactory) -> None:
    """While too many records wait for a vector, capture is refused: the call is answered,
    and the next call, which carries the whole conversation again, captures what was missed."""
    proxied = make_proxied(server={"tenant_pending_embeddings": 2})
    client = proxied.client()
    proxied.upstream.push(Reply.text("One."), Reply.text("Two."), Reply.text("Three."))
    conversation = [user("first")]
    for reply in ("One.", "Two."):
        got = client.chat.completions.create(model="m", messages=conversation,
                                             extra_headers=SESSION)  # fmt: skip
        assert got.choices[0].message.content == reply
        conversation += [assistant(reply), user(f"after {reply}")]
    assert proxied.said("s1") == [("user", "first"), ("assistant", "One.")]
    assert proxied.metric("proxy_capture_failures") == 1
    proxied.run(proxied.services.memory.embed_pending())
    client.chat.completions.create(model="m", messages=conversation, extra_headers=SESSION)
    assert proxied.said("s1") == [(m["role"], m["content"]) for m in conversation] + [
        ("assistant", "Three.")
    ]


def test_a_client_that_goes_away_mid_stream_ends_the_upstream_call_and_captures_nothing(
    proxied: Proxied,
) -> None:
    proxied.upstream.push(Reply.streamed("Once ", "upon ", "a ", "time.", hold_after=2))
    body = {"model": "m", "messages": [user("Tell me a story")], "stream": True}
    with HTTP.stream("POST", f"{proxied.base_url}/chat/completions", json=body,
                      headers={**proxied.headers, **SESSION}) as answer:  # fmt: skip
        seen = b""
        for data in answer.iter_raw():
            seen += data
            if b"upon " in seen:
                break
    assert proxied.upstream.wait_disconnected()
    assert proxied.said("s1") == []
    proxied.upstream.push(Reply.streamed("The ", "end."))
    done = list(proxied.client().chat.completions.create(
        model="m", messages=body["messages"], stream=True, extra_headers=SESSION))  # fmt: skip
    assert done[-1].choices[0].finish_reason == "stop"
    assert proxied.said("s1") == [("user", "Tell me a story"), ("assistant", "The end.")]


def test_an_upstream_stream_cut_short_is_not_captured(proxied: Proxied) -> None:
    proxied.upstream.push(Reply.streamed("Once ", "upon ", hold_after=1))
    body = {"model": "m", "messages": [user("Tell me a story")], "stream": True}

    with HTTP.stream("POST", f"{proxied.base_url}/chat/completions", json=body,
                      headers={**proxied.headers, **SESSION}) as answer:  # fmt: skip
        chunks = answer.iter_raw()
        first = next(chunks)
        proxied.upstream.stop()  # the upstream dies mid-answer
        rest = b"".join(chunks)
    assert b"Once" in first + rest
    assert b"[DONE]" not in rest and b'"type": "upstream_unreachable"' in rest  # an error event
    assert proxied.said("s1") == []


def test_a_conversation_over_the_service_body_limit_is_taken(make_proxied: ProxyFactory) -> None:
    proxied = make_proxied(server={"max_body_bytes": 1024 * 1024})
    pasted = "x " * 800_000  # 1.6 MB: over the service's limit, under the proxy's
    proxied.upstream.push(Reply.text("That is long."))
    answer = HTTP.post(f"{proxied.base_url}/chat/completions", headers=proxied.headers,
                        json={"model": "m", "messages": [user(pasted)]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    over = HTTP.post(f"{proxied.url}/v1/capture", headers=proxied.headers,
                      json={"session": "s", "messages": [user(pasted)]})  # fmt: skip
    assert over.status_code == 413
