"""One contract suite, run against every embedder: local model (ONNX, fp32 and int8),
OpenAI-compatible, hashing, and the persistent cache around one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from stratamem.embed import Embedder, HashingEmbedder, LocalEmbedder, OpenAIEmbedder
from stratamem.embed.cached import CachedEmbedder
from stratamem.testing import ScriptedLLM

TEXTS = [
    "The user prefers green tea over coffee.",
    "We moved to Lisbon in March 2023.",
    "Always answer in French.",
    "",
    "Ünïcödé ✓ — 東京で寿司を食べた",
    "a much longer text " * 40,
]


@pytest.fixture(scope="session")
def local_embedder() -> LocalEmbedder:
    """One local embedder for the session; the model itself is cached per process."""
    return LocalEmbedder(batch_size=4)


@pytest.fixture(scope="session")
def int8_embedder() -> LocalEmbedder:
    return LocalEmbedder(precision="int8")


@pytest.fixture(scope="session")
def fp32_embedder() -> LocalEmbedder:
    return LocalEmbedder(precision="fp32", batch_size=4)


@pytest.fixture(params=["local", "local-fp32", "local-int8", "hash", "openai", "cached"])
async def embedder(
    request: pytest.FixtureRequest, local_embedder: LocalEmbedder
) -> AsyncIterator[Embedder]:
    if request.param == "local":
        yield local_embedder
        return
    if request.param in ("local-int8", "local-fp32"):
        yield request.getfixturevalue(f"{request.param.removeprefix('local-')}_embedder")
        return
    if request.param == "hash":
        made: Embedder = HashingEmbedder()
    elif request.param == "cached":
        tmp_path: Path = request.getfixturevalue("tmp_path")
        made = CachedEmbedder(HashingEmbedder(), tmp_path / "cache" / "vectors.sqlite")
    else:
        server: ScriptedLLM = request.getfixturevalue("scripted_llm")
        made = OpenAIEmbedder("scripted-embed", base_url=server.base_url, batch_size=4)
        await made.embed(["warm-up: discovers the dimension"])
    yield made
    await made.aclose()


def test_satisfies_the_protocol(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.model
    assert embedder.dim > 0


async def test_shape_and_dtype(embedder: Embedder) -> None:
    vectors = await embedder.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), embedder.dim)
    assert vectors.dtype == np.float32


async def test_rows_are_unit_length(embedder: Embedder) -> None:
    vectors = await embedder.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


async def test_deterministic(embedder: Embedder) -> None:
    first = await embedder.embed(TEXTS)
    second = await embedder.embed(TEXTS)
    np.testing.assert_allclose(first, second, atol=1e-5)


async def test_empty_input(embedder: Embedder) -> None:
    vectors = await embedder.embed([])
    assert vectors.shape == (0, embedder.dim)
    assert vectors.dtype == np.float32


async def test_alone_equals_in_batch(embedder: Embedder) -> None:
    batch = await embedder.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        alone = await embedder.embed([text])
        np.testing.assert_allclose(alone[0], batch[i], atol=1e-4)


async def test_rows_follow_the_order_of_texts(embedder: Embedder) -> None:
    forward = await embedder.embed(TEXTS[:3])
    backward = await embedder.embed(TEXTS[:3][::-1])
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-4)
    assert not np.allclose(forward[0], forward[1], atol=1e-3)


async def test_concurrent_calls_agree_with_sequential_ones(embedder: Embedder) -> None:
    sequential = [await embedder.embed([text]) for text in TEXTS]
    concurrent = await asyncio.gather(*(embedder.embed([text]) for text in TEXTS))
    for alone, together in zip(sequential, concurrent, strict=True):
        np.testing.assert_allclose(alone, together, atol=1e-4)


async def test_a_bare_string_is_refused(embedder: Embedder) -> None:
    with pytest.raises(TypeError):
        await embedder.embed("one text, not a list")


async def test_local_model_captures_meaning(local_embedder: LocalEmbedder) -> None:
    vectors = await local_embedder.embed(
        [
            "I adopted a puppy last week.",
            "We got a young dog a few days ago.",
            "The quarterly tax filing is due in April.",
        ]
    )
    similar = float(vectors[0] @ vectors[1])
    unrelated = float(vectors[0] @ vectors[2])
    assert similar > unrelated + 0.3
    assert local_embedder.model == "all-MiniLM-L6-v2"
    assert local_embedder.dim == 384
