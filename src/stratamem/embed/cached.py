"""An embedder that keeps every vector it made in a SQLite file, for runs that embed the same
texts again and again (the evaluation harness: one ingest of the LoCoMo dev split is ~9,000
sentence pieces, half a minute of a 2-core CPU; with the cache, a second run embeds nothing).

Vectors are keyed by what made them (`base.vector_source`: the wrapped embedder's model name, or
its runtime where two of the same name differ, as the local q8 graph and float32 do) and a hash
of the text, so any embedder can be wrapped, and vectors of different sources never mix. The
name is trusted: an embedder that makes other vectors under the same name without saying so
needs another file.
A vector read back is exactly the one stored (float32), so results do not depend on whether the
cache was warm.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stratamem.embed.base import (
    Embedder,
    Vectors,
    check_texts,
    empty,
    is_loaded,
    preload,
    vector_source,
)
from stratamem.errors import ConfigError, EmbeddingError
from stratamem.files import create_private, enter_wal

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    key BLOB NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, key)
) WITHOUT ROWID
"""
#: Keys looked up per SQL statement (SQLite's default limit of host parameters is 32766).
_CHUNK = 500
CACHE_BUSY_TIMEOUT_S = 5.0
"""How long opening the cache waits for another process to switch a new file to WAL (the
busy timeout `sqlite3.connect` gives its connections)."""


def text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _known_dim(embedder: Embedder) -> int | None:
    """The embedder's width, or None while it is not known (an endpoint not yet called)."""
    try:
        return embedder.dim
    except EmbeddingError:
        return None


class CachedEmbedder:
    """`inner` with a persistent cache of its vectors in the SQLite file `path` (created when
    missing). Closing it closes `inner` too. `hits` and `misses` count texts served from the
    cache and texts `inner` embedded."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.path = path
        try:
            create_private(path)
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            enter_wal(self._conn, CACHE_BUSY_TIMEOUT_S)
            self._conn.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the embedding cache {path}: {exc}") from exc
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def loaded(self) -> bool:
        return is_loaded(self.inner)

    async def load(self) -> None:
        await preload(self.inner)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(self.dim)
        found = await asyncio.to_thread(self._read, items)
        missing = list(dict.fromkeys(t for t in items if t not in found))
        if missing:
            made = await self.inner.embed(missing)
            found.update(zip(missing, made, strict=True))
            await asyncio.to_thread(self._write, missing, made)
        self.hits += len(items) - len(missing)
        self.misses += len(missing)
        return np.stack([found[t] for t in items]).astype(np.float32, copy=False)

    def _read(self, items: list[str]) -> dict[str, np.ndarray]:
        keys = {text_key(t): t for t in items}
        found: dict[str, np.ndarray] = {}
        source = vector_source(self.inner)
        dim = _known_dim(self.inner)
        wanted = list(keys)
        with self._lock:
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                marks = ", ".join("?" for _ in chunk)
                rows = self._conn.execute(
                    f"SELECT key, vector FROM vectors WHERE model = ? AND key IN ({marks})",
                    [source, *chunk],
                ).fetchall()
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if dim is None or vector.shape[0] == dim:
                        found[keys[key]] = vector
        return found

    def _write(self, texts: list[str], vectors: np.ndarray) -> None:
        source = vector_source(self.inner)
        rows = [
            (source, text_key(t), np.asarray(v, dtype=np.float32).tobytes())
            for t, v in zip(texts, vectors, strict=True)
        ]
        with self._lock:
            self._conn.execute("BEGIN")
            self._conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
            self._conn.execute("COMMIT")

    async def aclose(self) -> None:
        with self._lock:
            self._conn.close()
        await self.inner.aclose()
