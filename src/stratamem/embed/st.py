"""all-MiniLM-L6-v2 via sentence-transformers (torch), loaded offline from its package: the
`st` embedder, for installs that have torch anyway, and the reference the default (ONNX) local
embedder is measured against (`bench/embedders.py`).

The model is loaded lazily, once per process and model path (thread-safe), on the CPU, and runs
in a worker thread so the event loop is never blocked. Needs the `st` extra
(`torch`, `sentence-transformers`) and the model package.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.embed.base import Vectors, check_texts, empty, normalise_rows
from stratamem.embed.local import MODEL_DIM, MODEL_NAME, package_model_dir
from stratamem.errors import EmbeddingError

DEFAULT_BATCH_SIZE = 32
_HF_ENV = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
    "HF_HUB_DISABLE_PROGRESS_BARS",
)
_INSTALL_HINT = "install the st extra: pip install 'stratamem[st]' (torch CPU first, see README)"


@dataclass(slots=True)
class _Loaded:
    model: Any
    lock: threading.Lock
    """Serialises encode calls: the fast tokenizer refuses concurrent use from threads."""


_cache: dict[tuple[str, str], _Loaded] = {}
_cache_lock = threading.Lock()


def _load(path: Path, device: str) -> _Loaded:
    key = (str(path), device)
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is None:
            loaded = _Loaded(model=_construct(path, device), lock=threading.Lock())
            _cache[key] = loaded
        return loaded


def _construct(path: Path, device: str) -> Any:
    # The model comes from a local directory: never let the libraries reach for a hub, send
    # telemetry, or draw progress bars over a CLI's output. A caller's own setting wins.
    for name in _HF_ENV:
        os.environ.setdefault(name, "1")
    try:
        from sentence_transformers import (  # noqa: PLC0415  (heavy; optional extra)
            SentenceTransformer,
        )
    except ImportError as e:
        raise EmbeddingError(f"sentence-transformers is missing; {_INSTALL_HINT}") from e
    try:
        return SentenceTransformer(str(path), device=device)
    except (OSError, ValueError, RuntimeError) as e:
        raise EmbeddingError(f"could not load the local model from {path}: {e}") from e


def _dimension(model: Any) -> int:
    # sentence-transformers >= 5 renamed get_sentence_embedding_dimension.
    getter = getattr(model, "get_embedding_dimension", None)
    if getter is None:
        getter = model.get_sentence_embedding_dimension
    return int(getter())


class SentenceTransformerEmbedder:
    """`Embedder` running all-MiniLM-L6-v2 in-process on torch; `model` is `all-MiniLM-L6-v2`,
    dim 384: the same name as the ONNX local embedder, whose vectors are the same."""

    def __init__(
        self,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        model_path: Path | None = None,
        device: str = "cpu",
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._batch_size = batch_size
        self._model_path = model_path
        self._device = device
        self._ready = False

    @property
    def model(self) -> str:
        return MODEL_NAME

    @property
    def dim(self) -> int:
        return MODEL_DIM

    @property
    def loaded(self) -> bool:
        return self._ready

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first `embed`."""
        await asyncio.to_thread(self._loaded)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(MODEL_DIM)
        return await asyncio.to_thread(self._encode, items)

    async def aclose(self) -> None:
        return None  # the model stays cached for the process; there is nothing to release

    def _loaded(self) -> _Loaded:
        loaded = _load(self._model_path or package_model_dir(), self._device)
        dim = _dimension(loaded.model)
        if dim != MODEL_DIM:
            raise EmbeddingError(f"the local model has dimension {dim}, expected {MODEL_DIM}")
        self._ready = True
        return loaded

    def _encode(self, texts: list[str]) -> Vectors:
        loaded = self._loaded()
        with loaded.lock:
            try:
                rows = loaded.model.encode(
                    texts,
                    batch_size=self._batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            except (RuntimeError, ValueError) as e:
                raise EmbeddingError(f"the local model failed to embed {len(texts)} texts") from e
        return normalise_rows(np.asarray(rows), source="the local model")
