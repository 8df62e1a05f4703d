"""`FairEmbedder`: a query waits for at most one background chunk, and nothing is lost or
reordered in the vectors it returns."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from stratamem.embed.base import Vectors
from stratamem.embed.fair import FairEmbedder, _QueriesFirst
from stratamem.embed.hashing import HashingEmbedder
from stratamem.errors import EmbeddingError


class Gated(HashingEmbedder):
    """The hashing embedder, recording each call and holding it until the test opens its gate."""

    def __init__(self) -> None:
        super().__init__(32)
        self.calls: list[list[str]] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        self.entered.set()
        await self.gate.wait()
        await asyncio.sleep(0)  # as a real embedder does: it yields while it works
        return await super().embed(texts)


async def test_a_query_overtakes_every_background_chunk_not_yet_started() -> None:
    inner = Gated()
    fair = FairEmbedder(inner, chunk_texts=4)
    texts = [f"background text {i}" for i in range(12)]
    background = asyncio.create_task(fair.embed(texts))
    await inner.entered.wait()  # the first chunk is running
    query = asyncio.create_task(fair.embed_query(["the user's question"]))
    while fair.queries_waiting == 0:
        await asyncio.sleep(0)  # let the query reach the queue (no time passes)
    inner.gate.set()
    vectors, found = await background, await query
    assert inner.calls == [texts[0:4], ["the user's question"], texts[4:8], texts[8:12]]
    plain = HashingEmbedder(32)
    assert np.array_equal(vectors, await plain.embed(texts))
    assert np.array_equal(found, await plain.embed(["the user's question"]))


async def test_background_calls_take_turns_chunk_by_chunk() -> None:
    inner = Gated()
    inner.gate.set()
    fair = FairEmbedder(inner, chunk_texts=2)
    first, second = ["a1", "a2", "a3", "a4"], ["b1", "b2"]
    await asyncio.gather(fair.embed(first), fair.embed(second))
    assert sorted(map(tuple, inner.calls)) == [("a1", "a2"), ("a3", "a4"), ("b1", "b2")]
    assert inner.calls.index(["b1", "b2"]) < inner.calls.index(["a3", "a4"])


async def test_a_cancelled_waiter_does_not_keep_the_embedder() -> None:
    inner = Gated()
    fair = FairEmbedder(inner, chunk_texts=1)
    running = asyncio.create_task(fair.embed(["x"]))
    await inner.entered.wait()
    waiting = asyncio.create_task(fair.embed_query(["q"]))
    while fair.queries_waiting == 0:
        await asyncio.sleep(0)
    waiting.cancel()
    inner.gate.set()
    await running
    assert (await fair.embed_query(["later"])).shape == (1, 32)


async def test_a_waiter_cancelled_just_before_a_release_gives_up_cleanly() -> None:
    """The release skips the cancelled waiter before it wakes: it raises CancelledError (not a
    ValueError from removing itself twice) and the lock is free for the next one."""
    gate = _QueriesFirst()
    await gate.acquire(query=False)
    waiter = asyncio.create_task(gate.acquire(query=True))
    while gate.queries_waiting == 0:
        await asyncio.sleep(0)
    waiter.cancel()
    gate.release()  # before the waiter has run: it finds its future cancelled, skips it
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait_for(gate.acquire(query=True), timeout=1)


async def test_queries_waiting_together_are_embedded_in_one_call() -> None:
    inner = Gated()
    fair = FairEmbedder(inner, chunk_texts=4)
    background = asyncio.create_task(fair.embed(["b1", "b2", "b3", "b4", "b5"]))
    await inner.entered.wait()
    questions = [["q1"], ["q2", "q3"], ["q4"]]
    queries = [asyncio.create_task(fair.embed_query(q)) for q in questions]
    while fair.queries_waiting < len(questions):
        await asyncio.sleep(0)
    inner.gate.set()
    found = await asyncio.gather(*queries)
    await background
    assert inner.calls == [["b1", "b2", "b3", "b4"], ["q1", "q2", "q3", "q4"], ["b5"]]
    plain = HashingEmbedder(32)
    for texts, vectors in zip(questions, found, strict=True):
        assert np.array_equal(vectors, await plain.embed(texts))


class Failing(HashingEmbedder):
    async def embed(self, texts: Sequence[str]) -> Vectors:
        raise EmbeddingError("the endpoint is down")


async def test_a_failure_reaches_every_query_of_the_batch() -> None:
    fair = FairEmbedder(Failing(32))
    results = await asyncio.gather(
        fair.embed_query(["a"]), fair.embed_query(["b"]), return_exceptions=True
    )
    assert all(isinstance(r, EmbeddingError) for r in results)
