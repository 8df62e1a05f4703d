"""The embedder contract: texts in, L2-normalised float32 rows out.

Every implementation (local model, OpenAI-compatible endpoint, feature hashing) satisfies
`Embedder`, and one contract test suite runs against each of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from stratamem.errors import EmbeddingError

Vectors = npt.NDArray[np.float32]
"""A (n, dim) float32 array whose rows have unit L2 norm."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    - `model` is a stable name the store records beside the vectors (for example
      `"all-MiniLM-L6-v2"` or `"hash-v1-384"`); vectors of different models never mix.
    - `dim` is the width of each vector.
    - `embed(texts)` returns a float32 array of shape `(len(texts), dim)`, each row L2-normalised,
      in the order of `texts`; an empty sequence gives shape `(0, dim)`. It never blocks the event
      loop. A failure raises `EmbeddingError` (chained to its cause).
    - `aclose()` releases connections or other resources; the embedder is not used afterwards.
    """

    @property
    def model(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> Vectors: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Preloadable(Protocol):
    """An embedder with a model to load (the local ones), which it otherwise loads on first use.

    - `load()` loads it now, in a worker thread; a failure raises `EmbeddingError`.
    - `loaded` says whether it is loaded (so the first `embed` pays no load).
    """

    @property
    def loaded(self) -> bool: ...

    async def load(self) -> None: ...


async def preload(embedder: Embedder) -> None:
    """Load `embedder`'s model now when it has one to load."""
    if isinstance(embedder, Preloadable):
        await embedder.load()


def vector_source(embedder: Embedder) -> str:
    """What made `embedder`'s vectors, for caches: its `vector_source` attribute where it has
    one (another runtime of the same model, whose vectors differ a little, under the same
    model name), else its model name."""
    source = getattr(embedder, "vector_source", None)
    return source if isinstance(source, str) else embedder.model


def is_loaded(embedder: Embedder) -> bool:
    """True unless `embedder` has a model that is not loaded yet."""
    return not isinstance(embedder, Preloadable) or embedder.loaded


def empty(dim: int) -> Vectors:
    return np.zeros((0, dim), dtype=np.float32)


def normalise_rows(rows: npt.ArrayLike, *, source: str) -> Vectors:
    """Return `rows` as float32 with unit L2 norm per row.

    Raises `EmbeddingError` when a row is zero or not finite, since it cannot be normalised and
    would poison similarity search.
    """
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.ndim != 2:
        raise EmbeddingError(f"{source} returned an array of shape {matrix.shape}, expected 2-D")
    if not np.all(np.isfinite(matrix)):
        raise EmbeddingError(f"{source} returned a vector with NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if np.any(norms == 0.0):
        raise EmbeddingError(f"{source} returned an all-zero vector that cannot be normalised")
    normalised: Vectors = (matrix / norms).astype(np.float32)
    return normalised


def check_texts(texts: Sequence[str]) -> list[str]:
    """Accept a sequence of strings (not a bare string, which is a sequence of characters)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single string")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"text {i} is {type(text).__name__}, not str")
    return items
