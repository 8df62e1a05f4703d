"""A deterministic feature-hashing embedder: word unigrams and bigrams, signed hashing.

A light option for installs without the model: no model files, no network, the same vector for
the same text on every machine and every run (blake2b, not Python's salted `hash`). It captures
lexical overlap, not meaning; prefer the local model or an endpoint when they are available.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from stratamem.embed.base import Vectors, check_texts, empty

DEFAULT_DIM = 384
BIGRAM_WEIGHT = 0.5
_EMPTY_TOKEN = "\x00empty"
_THREAD_THRESHOLD = 64
"""Batches longer than this are hashed in a worker thread, so the event loop stays free."""

_WORD = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    """Case-folded word tokens of `text` (Unicode word characters)."""
    return _WORD.findall(text.casefold())


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, person=b"stratamem").digest()
    value = int.from_bytes(digest, "little")
    sign = 1.0 if (value >> 63) & 1 == 0 else -1.0
    return value % dim, sign


def hash_features(text: str, dim: int) -> npt.NDArray[np.float32]:
    """The unit-norm hashed vector of one text.

    Unigrams count 1, bigrams `BIGRAM_WEIGHT`; each feature lands in one of `dim` buckets with a
    hashed sign, so collisions tend to cancel instead of adding up. A text without words maps to
    one fixed feature, so every row still has unit norm.
    """
    words = tokens(text)
    features = [(w, 1.0) for w in words]
    features += [(f"{a} {b}", BIGRAM_WEIGHT) for a, b in pairwise(words)]
    vector = np.zeros(dim, dtype=np.float64)
    for feature, weight in features:
        index, sign = _bucket(feature, dim)
        vector[index] += sign * weight
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:  # no words, or every feature cancelled out
        return _empty_vector(dim)
    return (vector / norm).astype(np.float32)


def _empty_vector(dim: int) -> npt.NDArray[np.float32]:
    vector = np.zeros(dim, dtype=np.float32)
    index, sign = _bucket(_EMPTY_TOKEN, dim)
    vector[index] = sign
    return vector


class HashingEmbedder:
    """`Embedder` by feature hashing; `model` is `hash-v1-<dim>`."""

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if dim < 8:
            raise ValueError("hashing embedder needs dim >= 8")
        self._dim = dim

    @property
    def model(self) -> str:
        return f"hash-v1-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(self._dim)
        return np.stack([hash_features(text, self._dim) for text in items])

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if len(texts) > _THREAD_THRESHOLD:
            return await asyncio.to_thread(self.embed_sync, texts)
        return self.embed_sync(texts)

    async def aclose(self) -> None:
        return None
