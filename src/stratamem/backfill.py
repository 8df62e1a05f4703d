"""Embedding catch-up: records are captured first and embedded afterwards, in batches."""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from stratamem.cancelling import cancel_and_wait
from stratamem.domain import Layer
from stratamem.embed.base import Embedder
from stratamem.errors import EmbeddingError, EmbeddingMismatch
from stratamem.store.core.port import EmbeddingInfo, Store

log = logging.getLogger(__name__)

RETRY_DELAY_S = 5.0


async def embed_pending(
    store: Store,
    embedder: Embedder,
    batch_size: int,
    max_records: int | None = None,
    tenant: str | None = None,
    layers: tuple[Layer, ...] = (Layer.L1, Layer.L0),
) -> int:
    """Embed records of `layers` that have no vector yet (every tenant's, or only `tenant`'s),
    in that order, each as its pieces (a turn: one vector per sentence); return how many were
    embedded."""
    done = 0
    for layer in layers:
        while max_records is None or done < max_records:
            limit = batch_size if max_records is None else min(batch_size, max_records - done)
            pending = await asyncio.to_thread(store.pending_embeddings, layer, limit, tenant)
            if not pending:
                break
            counts = [len(p.texts) for p in pending]
            texts = [text for p in pending for text in p.texts]
            vectors = await embedder.embed(texts)
            if vectors.ndim != 2 or vectors.shape[0] != len(texts):
                raise EmbeddingError(
                    f"embedder {embedder.model} returned shape {vectors.shape}"
                    f" for {len(texts)} texts"
                )
            info = EmbeddingInfo(model=embedder.model, dim=int(vectors.shape[1]))
            items = [(p.tenant, p.id) for p in pending]
            await asyncio.to_thread(_bind_and_store, store, info, layer, items, vectors, counts)
            done += len(pending)
    return done


async def embed_added(store: Store, embedder: Embedder, batch_size: int, tenant: str) -> None:
    """Embed up to a batch of the tenant's pending memories now: one stated directly is one
    text, so it is searchable by meaning when the call returns (captured turns wait for the
    background). An embedder that fails leaves them to the background catch-up."""
    try:
        await embed_pending(store, embedder, batch_size, batch_size, tenant, (Layer.L1,))
    except EmbeddingMismatch:
        raise
    except EmbeddingError as exc:
        log.warning("embedding an added memory failed, left to the background: %s", exc)


def _bind_and_store(
    store: Store,
    info: EmbeddingInfo,
    layer: Layer,
    items: list[tuple[str, str]],
    vectors: np.ndarray,
    counts: list[int],
) -> None:
    """Bind the model, then store its vectors: one trip to a thread (each trip is a hop of
    the event loop; an L1 made this one after each commit, bench/drain.py)."""
    store.bind_embedding(info)
    store.store_embeddings(layer, items, vectors, counts)


def bind_if_known(store: Store, embedder: Embedder) -> None:
    """Record the embedder's model in the store, refusing a different one already recorded.

    An embedder whose dimension is only known after its first call (an OpenAI-compatible
    endpoint without a configured dimension) is checked at that first call instead.
    """
    try:
        dim = embedder.dim
    except EmbeddingError:
        return
    store.bind_embedding(EmbeddingInfo(model=embedder.model, dim=dim))


class Backfill:
    """A background task that embeds captured records while the memory is open."""

    def __init__(self, store: Store, embedder: Embedder, batch_size: int) -> None:
        self._store = store
        self._embedder = embedder
        self._batch_size = batch_size
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.last_error: str | None = None
        self.embedded = 0

    def poke(self) -> None:
        """Ask for a catch-up soon; starts the background task on first use."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self.embedded += await embed_pending(self._store, self._embedder, self._batch_size)
                self.last_error = None
            except EmbeddingMismatch:
                raise
            except EmbeddingError as exc:  # kept, reported in stats, retried later
                self.last_error = str(exc)
                log.warning("embedding catch-up failed, retrying in %ss: %s", RETRY_DELAY_S, exc)
                await asyncio.sleep(RETRY_DELAY_S)
                self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
