"""The embedding cache: a text is embedded once, then read back exactly, across processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stratamem.embed import HashingEmbedder, LocalEmbedder
from stratamem.embed.cached import CachedEmbedder
from stratamem.errors import ConfigError


async def test_a_second_cache_on_the_same_file_embeds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite"
    first = CachedEmbedder(HashingEmbedder(), path)
    made = await first.embed(["alpha beta", "gamma", "alpha beta"])
    assert (first.hits, first.misses) == (1, 2)  # the repeat inside one call is embedded once
    await first.aclose()

    again = CachedEmbedder(HashingEmbedder(), path)
    read = await again.embed(["gamma", "alpha beta", "delta"])
    assert (again.hits, again.misses) == (2, 1)
    np.testing.assert_array_equal(read[:2], made[[1, 0]])  # bit for bit
    await again.aclose()


async def test_models_never_share_vectors(tmp_path: Path) -> None:
    path = tmp_path / "vectors.sqlite"
    narrow = CachedEmbedder(HashingEmbedder(64), path)
    await narrow.embed(["same text"])
    await narrow.aclose()
    wide = CachedEmbedder(HashingEmbedder(128), path)
    vectors = await wide.embed(["same text"])
    assert vectors.shape == (1, 128)
    assert wide.misses == 1
    await wide.aclose()


def test_an_unusable_path_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    with pytest.raises(ConfigError):
        CachedEmbedder(HashingEmbedder(), blocker / "vectors.sqlite")


async def test_the_q8_and_float32_graphs_never_share_vectors(tmp_path: Path) -> None:
    """Both are `all-MiniLM-L6-v2`, but a cache warmed by one must not answer for the other:
    an evaluation of the default would otherwise measure the float32 vectors."""
    path, texts = tmp_path / "vectors.sqlite", ["where did Maya move?", "she moved to Lisbon"]
    exact = CachedEmbedder(LocalEmbedder(precision="fp32"), path)
    float32 = await exact.embed(texts)
    await exact.aclose()
    default = CachedEmbedder(LocalEmbedder(), path)
    q8 = await default.embed(texts)
    assert (default.hits, default.misses) == (0, 2)
    assert not np.array_equal(q8, float32)
    assert np.sum(q8 * float32, axis=1).min() > 0.999
    again = CachedEmbedder(LocalEmbedder(), path)
    np.testing.assert_array_equal(await again.embed(texts), q8)
    assert again.hits == 2
    await default.aclose()
    await again.aclose()
