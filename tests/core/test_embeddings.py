"""Embeddings through the core: background catch-up, model mismatch, reindex, semantic search."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Layer, Scope
from stratamem.embed import HashingEmbedder, LocalEmbedder
from stratamem.errors import EmbeddingMismatch
from stratamem.store.core.port import Filters


def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", embed_batch_size=2)


async def pending(memory: AsyncMemory) -> int:
    stats = await memory.stats()
    return int(stats["L0"]["pending_embeddings"])


async def test_capture_returns_before_embedding_and_vectors_catch_up(tmp_path: Path) -> None:
    memory = AsyncMemory.open(settings(tmp_path), embedder=HashingEmbedder(64))
    await memory.capture("acme", "s1", [{"role": "user", "content": f"note {i}"} for i in range(5)])
    assert await pending(memory) == 5  # acknowledged with nothing embedded yet
    for _ in range(100):  # the background batches run on this loop: yield until they are done
        if await pending(memory) == 0:
            break
        await asyncio.sleep(0)
    assert await pending(memory) == 0
    await memory.aclose()


async def test_an_added_memory_has_its_vector_when_the_call_returns(tmp_path: Path) -> None:
    """A memory stated directly is searchable by meaning at once (the README's agents block
    recalls one that shares no word with the question right after adding it)."""
    memory = AsyncMemory.open(settings(tmp_path), embedder=HashingEmbedder(64))
    await memory.capture("acme", "s1", [{"role": "user", "content": "note"}])
    record = await memory.add_memory("acme", "Wants distances in kilometres", type="instruction")
    assert memory.store.pending_embeddings(Layer.L1, 10, "acme") == []  # no await in between
    hits = await memory.search("acme", "How far should I walk today?", layers=[Layer.L1])
    assert [h.id for h in hits] == [record.id] and "L1:vector" in hits[0].ranks
    await memory.aclose()


async def test_opening_with_another_model_is_refused_and_reindex_fixes_it(
    tmp_path: Path,
) -> None:
    first = AsyncMemory.open(settings(tmp_path), embedder=HashingEmbedder(64))
    await first.capture("acme", "s1", [{"role": "user", "content": "the blue bicycle"}])
    await first.aclose(drain=True)
    with pytest.raises(EmbeddingMismatch, match="stratamem reindex"):
        AsyncMemory.open(settings(tmp_path), embedder=HashingEmbedder(128))
    fixer = AsyncMemory.open(
        settings(tmp_path), embedder=HashingEmbedder(128), verify_embedding=False
    )
    assert await fixer.reindex() == 1
    await fixer.aclose()
    reopened = AsyncMemory.open(settings(tmp_path), embedder=HashingEmbedder(128))
    hits = await reopened.search("acme", "bicycle")
    assert {"L0:bm25", "L0:vector"} <= hits[0].ranks.keys()  # (and L0:feedback, its own words)
    await reopened.aclose()


async def test_the_spinning_setting_reaches_the_embedder_it_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_ONNX_SPINNING", "on")
    memory = AsyncMemory.open(Settings(data_dir=tmp_path / "data", embedder="local"))
    assert isinstance(memory.embedder, LocalEmbedder) and memory.embedder.spinning
    await memory.aclose()


@pytest.fixture(scope="module")
def local_embedder() -> LocalEmbedder:
    return LocalEmbedder()


async def test_vector_search_finds_paraphrases_bm25_cannot(
    tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    memory = AsyncMemory.open(settings(tmp_path), embedder=local_embedder)
    await memory.capture(
        "acme",
        "s1",
        [
            {"role": "user", "content": "I adopted a small puppy last weekend"},
            {"role": "user", "content": "The quarterly budget review is on Monday"},
        ],
    )
    await memory.embed_pending()
    hits = await memory.search("acme", "new dog", layers=[Layer.L0], k=1)
    assert hits[0].text == "I adopted a small puppy last weekend"
    assert hits[0].ranks["L0:vector"] == 1
    assert "L0:bm25" not in hits[0].ranks
    await memory.aclose()
    assert (await local_embedder.embed(["still usable: the caller owns it"])).shape == (1, 384)


async def test_a_long_turn_is_found_by_the_sentence_that_matches(
    tmp_path: Path, local_embedder: LocalEmbedder
) -> None:
    """One vector per sentence: a turn that talks about several things is found by the vector
    of the one the query is about, not by a blur of all of them."""
    memory = AsyncMemory.open(settings(tmp_path), embedder=local_embedder)
    long_turn = (
        "Work has been hectic with the quarterly budget review and the audit. My sister visited"
        " and we repainted the kitchen together. Oh, and I adopted a small puppy last weekend."
        " The weather was awful all week."
    )
    await memory.capture(
        "acme",
        "s1",
        [
            {"role": "user", "content": long_turn},
            {"role": "user", "content": "We talked about animals at the zoo for a school trip"},
        ],
    )
    assert await memory.embed_pending() == 2
    vector = (await local_embedder.embed(["user: new dog"]))[0]
    found = await asyncio.to_thread(
        memory.store.search_vector, Scope("acme"), Layer.L0, vector, Filters(), 2
    )
    assert found[0].id == (await memory.search("acme", "adopted puppy", k=1))[0].id
    whole = (await local_embedder.embed([f"user: {long_turn}"]))[0]
    best_sentence = found[0].score
    assert best_sentence > float(whole @ vector) + 0.1
    await memory.aclose()
