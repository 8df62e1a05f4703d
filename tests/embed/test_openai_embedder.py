"""The OpenAI-compatible embedder against the scripted server: errors, retries, dimensions."""

from __future__ import annotations

import email.utils

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from stratamem.clock import ManualClock
from stratamem.embed import OpenAIEmbedder
from stratamem.errors import EmbeddingError
from stratamem.httpretry import RetryPolicy
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


def make(server: ScriptedLLM, sleep: RecordingSleep, **options: object) -> OpenAIEmbedder:
    return OpenAIEmbedder("scripted-embed", base_url=server.base_url, sleep=sleep, **options)  # type: ignore[arg-type]


async def test_malformed_reply_is_an_embedding_error(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push_embeddings(Reply.raw("this is not json"))
    embedder = make(scripted_llm, sleep)
    with pytest.raises(EmbeddingError, match="malformed") as caught:
        await embedder.embed(["hello"])
    assert isinstance(caught.value.__cause__, ValidationError)
    await embedder.aclose()


@pytest.mark.parametrize(
    "body",
    [
        {"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [0.0, 1.0]}]},
        {"data": [{"index": 0, "embedding": [1.0, 0.0]}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [0.0, 1.0]}]},
        {"data": [{"index": 0, "embedding": [0.0, 0.0]}, {"index": 1, "embedding": [0.0, 1.0]}]},
        {"data": [{"index": 0, "embedding": ["x"]}, {"index": 1, "embedding": [0.0]}]},
        {"object": "list"},
    ],
    ids=["duplicate-index", "too-few", "ragged", "zero-vector", "not-numbers", "no-data"],
)
async def test_inconsistent_replies_are_refused(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep, body: object
) -> None:
    scripted_llm.push_embeddings(Reply.raw(body))
    embedder = make(scripted_llm, sleep)
    with pytest.raises(EmbeddingError):
        await embedder.embed(["one", "two"])
    await embedder.aclose()


async def test_server_error_then_success(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    scripted_llm.push_embeddings(Reply.error(500), Reply.error(503))
    embedder = make(scripted_llm, sleep, retry=RetryPolicy(base_delay_s=1.0))
    vectors = await embedder.embed(["hello"])
    assert vectors.shape == (1, 64)
    assert sleep.delays == [1.0, 2.0]
    assert len(scripted_llm.calls(path="/v1/embeddings")) == 3
    await embedder.aclose()


async def test_rate_limit_honours_retry_after(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push_embeddings(Reply.rate_limited(7))
    embedder = make(scripted_llm, sleep)
    await embedder.embed(["hello"])
    assert sleep.delays == [7.0]
    await embedder.aclose()


async def test_retry_after_as_http_date(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    clock = ManualClock(start=1_700_000_000.0)
    when = email.utils.formatdate(clock.now() + 12, usegmt=True)
    scripted_llm.push_embeddings(Reply.rate_limited(when))
    embedder = make(scripted_llm, sleep, clock=clock)
    await embedder.embed(["hello"])
    assert sleep.delays == [12.0]
    await embedder.aclose()


async def test_retry_after_beyond_the_limit_fails_without_waiting(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push_embeddings(Reply.rate_limited(3600))
    embedder = make(scripted_llm, sleep, retry=RetryPolicy(max_delay_s=60))
    with pytest.raises(EmbeddingError, match="429"):
        await embedder.embed(["hello"])
    assert sleep.delays == []
    await embedder.aclose()


async def test_retries_are_bounded(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    scripted_llm.push_embeddings(*[Reply.error(500)] * 5)
    embedder = make(scripted_llm, sleep, retry=RetryPolicy(max_attempts=3))
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        await embedder.embed(["hello"])
    assert len(scripted_llm.calls(path="/v1/embeddings")) == 3
    assert len(sleep.delays) == 2
    await embedder.aclose()


async def test_client_errors_are_not_retried(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push_embeddings(Reply.error(401, "bad key"))
    embedder = make(scripted_llm, sleep)
    with pytest.raises(EmbeddingError, match="HTTP 401"):
        await embedder.embed(["hello"])
    assert sleep.delays == []
    await embedder.aclose()


async def test_dimension_change_is_refused(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    embedder = make(scripted_llm, sleep)
    await embedder.embed(["first call discovers 64"])
    assert embedder.dim == 64
    scripted_llm.push_embeddings(Reply.embeddings([[1.0, 0.0, 0.0]]))
    with pytest.raises(EmbeddingError, match="changed dimension from 64 to 3"):
        await embedder.embed(["second call"])
    await embedder.aclose()


async def test_given_dimension_is_checked(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    embedder = make(scripted_llm, sleep, dim=128)
    with pytest.raises(EmbeddingError, match="dimension"):
        await embedder.embed(["hello"])
    await embedder.aclose()


async def test_dimension_is_discovered(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    embedder = make(scripted_llm, sleep)
    with pytest.raises(EmbeddingError, match="not known yet"):
        _ = embedder.dim
    assert (await embedder.embed([])).shape == (0, 64)
    assert await embedder.discover_dim() == 64
    assert len(scripted_llm.calls(path="/v1/embeddings")) == 1
    await embedder.aclose()


async def test_server_vectors_are_normalised(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push_embeddings(Reply.embeddings([[3.0, 4.0], [0.0, 2.0]]))
    embedder = make(scripted_llm, sleep)
    vectors = await embedder.embed(["a", "b"])
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 1.0]], atol=1e-6)
    await embedder.aclose()


async def test_batches_and_request_shape(scripted_llm: ScriptedLLM, sleep: RecordingSleep) -> None:
    embedder = make(scripted_llm, sleep, batch_size=4, api_key="sk-test")
    vectors = await embedder.embed([f"text {i}" for i in range(10)])
    assert vectors.shape == (10, 64)
    requests = scripted_llm.calls(path="/v1/embeddings")
    assert [len(r.body["input"]) for r in requests] == [4, 4, 2]
    assert requests[0].body["model"] == "scripted-embed"
    assert requests[0].headers["authorization"] == "Bearer sk-test"
    await embedder.aclose()


async def test_no_authorization_without_a_key(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    embedder = make(scripted_llm, sleep)
    await embedder.embed(["hello"])
    assert "authorization" not in scripted_llm.calls(path="/v1/embeddings")[0].headers
    await embedder.aclose()


async def test_timeout_is_an_embedding_error(
    scripted_llm: ScriptedLLM, sleep: RecordingSleep
) -> None:
    scripted_llm.push_embeddings(Reply.held())
    embedder = make(scripted_llm, sleep, timeout_s=0.2)
    with pytest.raises(EmbeddingError, match="timed out") as caught:
        await embedder.embed(["hello"])
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    await embedder.aclose()


async def test_unreachable_endpoint(sleep: RecordingSleep) -> None:
    with ScriptedLLM() as server:
        base_url = server.base_url
    embedder = OpenAIEmbedder("m", base_url=base_url, sleep=sleep)
    with pytest.raises(EmbeddingError, match="failed") as caught:
        await embedder.embed(["hello"])
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    await embedder.aclose()
