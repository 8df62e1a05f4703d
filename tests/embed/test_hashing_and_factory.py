"""The hashing embedder's own properties, and building embedders from specs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stratamem.embed import (
    HashingEmbedder,
    LocalEmbedder,
    OnnxEmbedder,
    OpenAIEmbedder,
    make_embedder,
)
from stratamem.embed.hashing import hash_features, tokens
from stratamem.embed.st import SentenceTransformerEmbedder
from stratamem.errors import ConfigError, EmbeddingError


def test_tokens_fold_case_and_keep_unicode_words() -> None:
    assert tokens("Hello, WORLD! Ça va? 東京") == ["hello", "world", "ça", "va", "東京"]


def test_vectors_are_stable_across_runs() -> None:
    # blake2b, not Python's salted hash: these buckets hold on every machine and run.
    vector = hash_features("green tea", 16)
    nonzero = {int(i): round(float(vector[i]), 4) for i in np.nonzero(vector)[0]}
    assert nonzero == {9: -0.3333, 11: 0.6667, 14: -0.6667}
    np.testing.assert_allclose(vector, hash_features("Green  TEA!", 16))


def test_lexical_overlap_brings_texts_closer() -> None:
    embedder = HashingEmbedder()
    a, b, c = embedder.embed_sync(
        ["the user loves green tea", "the user loves black tea", "quarterly tax filing"]
    )
    assert float(a @ b) > float(a @ c)


def test_bigrams_keep_word_order() -> None:
    embedder = HashingEmbedder()
    dog_bites, man_bites = embedder.embed_sync(["dog bites man", "man bites dog"])
    assert float(dog_bites @ man_bites) < 0.999


async def test_large_batches_run_in_a_thread_with_the_same_result() -> None:
    embedder = HashingEmbedder(dim=32)
    texts = [f"text number {i}" for i in range(200)]
    np.testing.assert_allclose(await embedder.embed(texts), embedder.embed_sync(texts))


def test_too_small_a_dimension_is_refused() -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=4)


@pytest.mark.parametrize(
    ("spec", "model", "dim"),
    [("hash", "hash-v1-384", 384), ("hash:256", "hash-v1-256", 256), ("HASH:64", "hash-v1-64", 64)],
)
def test_hash_specs(spec: str, model: str, dim: int) -> None:
    embedder = make_embedder(spec)
    assert isinstance(embedder, HashingEmbedder)
    assert (embedder.model, embedder.dim) == (model, dim)


@pytest.mark.parametrize(
    ("spec", "model"),
    [("local", "all-MiniLM-L6-v2"), ("minilm", "all-MiniLM-L6-v2"), ("Local", "all-MiniLM-L6-v2"),
     ("local:q8", "all-MiniLM-L6-v2"), ("local:fp32", "all-MiniLM-L6-v2"),
     ("local:int8", "all-MiniLM-L6-v2-int8"), ("local:INT8", "all-MiniLM-L6-v2-int8")],
)
def test_local_specs(spec: str, model: str) -> None:
    """Nothing is loaded (nor built) by making the embedder: the CLI loads only when it embeds."""
    embedder = make_embedder(spec, batch_size=8)
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.model, embedder.dim, embedder.loaded) == (model, 384, False)
    assert not embedder.spinning
    spinning = make_embedder(spec, onnx_spinning=True)
    assert isinstance(spinning, LocalEmbedder) and spinning.spinning


def test_st_spec_names_the_same_model_and_loads_nothing() -> None:
    embedder = make_embedder("st")
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert (embedder.model, embedder.dim, embedder.loaded) == ("all-MiniLM-L6-v2", 384, False)


def test_onnx_spec_names_the_directory(tmp_path: Path) -> None:
    folder = tmp_path / "my-encoder"
    folder.mkdir()
    embedder = make_embedder(f"onnx:{folder}")
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.model == "onnx:my-encoder"
    assert not embedder.spinning
    spinning = make_embedder(f"onnx:{folder}", onnx_spinning=True)
    assert isinstance(spinning, OnnxEmbedder) and spinning.spinning
    with pytest.raises(EmbeddingError, match="known once it is loaded"):
        _ = embedder.dim


async def test_openai_spec() -> None:
    embedder = make_embedder(
        "openai:text-embedding-3-small", base_url="http://127.0.0.1:9/v1", dim=1536
    )
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model, embedder.dim) == ("text-embedding-3-small", 1536)
    await embedder.aclose()


def test_none_spec_means_no_embedder() -> None:
    assert make_embedder("none") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("word2vec", "unknown embedder"),
        ("hash:abc", "integer"),
        ("hash:4", "integer >= 8"),
        ("openai:", "names no model"),
        ("openai:m", "base URL"),
        ("local:x", "unknown embedder"),
        ("onnx:", "names no directory"),
        ("onnx:/no/such/dir", "not a directory"),
        ("st:x", "unknown embedder"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_embedder(spec)
