"""`FairEmbedder`: one embedder shared by queries and background work, queries first.

Any `Embedder` can be wrapped. Calls reach it one at a time. A query (`embed_query`) waits at
most for the background chunk running when it arrives: background calls (`embed`, the
`Embedder` contract) are cut into chunks of `chunk_texts` texts and take their turn behind every
waiting query. Queries that wait together are embedded together, in one call: under load, ten
concurrent searches cost about one embedding call, not ten in a row. Which tenant's records the
background embeds next is the store's fair share
(`Store.pending_embeddings`); this class only keeps queries out of the background's queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

import numpy as np

from stratamem.embed.base import Embedder, Vectors, check_texts

DEFAULT_CHUNK_TEXTS = 8


class _QueriesFirst:
    """A lock that, when released, is handed to a waiting query before any background call."""

    def __init__(self) -> None:
        self._held = False
        self._waiting: dict[bool, deque[asyncio.Future[None]]] = {True: deque(), False: deque()}

    @property
    def queries_waiting(self) -> int:
        return len(self._waiting[True])

    async def acquire(self, query: bool) -> None:
        if not self._held and not self._waiting[True] and not self._waiting[False]:
            self._held = True
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[query].append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # it was handed over just as the waiter gave up: pass it on
            elif future in self._waiting[query]:  # not yet skipped by a release
                self._waiting[query].remove(future)
            raise

    def release(self) -> None:
        for lane in (True, False):
            while self._waiting[lane]:
                future = self._waiting[lane].popleft()
                if not future.done():
                    future.set_result(None)  # the lock passes to it, still held
                    return
        self._held = False


class FairEmbedder:
    """`inner`, with queries served before background chunks (see the module's notes)."""

    def __init__(self, inner: Embedder, chunk_texts: int = DEFAULT_CHUNK_TEXTS) -> None:
        if chunk_texts < 1:
            raise ValueError("chunk_texts must be at least 1")
        self.inner = inner
        self.chunk_texts = chunk_texts
        self._gate = _QueriesFirst()
        self._asked: list[tuple[list[str], asyncio.Future[Vectors]]] = []

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def queries_waiting(self) -> int:
        return self._gate.queries_waiting

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        """Embed `texts` for a search: ahead of any background chunk not yet started, together
        with the other queries waiting (the first to get the embedder embeds them all)."""
        mine: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        self._asked.append((check_texts(texts), mine))
        await self._gate.acquire(query=True)
        try:
            if not mine.done():
                batch, self._asked = self._asked, []
                await self._embed_together(batch)
        finally:
            self._gate.release()
        return mine.result()

    async def _embed_together(self, batch: list[tuple[list[str], asyncio.Future[Vectors]]]) -> None:
        """Embed the texts of every query in `batch` in one call and hand each its rows."""
        try:
            vectors = await self.inner.embed([text for texts, _ in batch for text in texts])
        except asyncio.CancelledError:  # the others are embedded by whoever gets the embedder next
            self._asked = [*batch, *self._asked]
            raise
        except Exception as exc:  # noqa: BLE001  (not swallowed: every query of the batch gets it)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for texts, future in batch:
            if not future.done():
                future.set_result(vectors[start : start + len(texts)])
            start += len(texts)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed `texts` as background work, a chunk at a time behind waiting queries."""
        items = check_texts(texts)
        if not items:
            return await self.inner.embed(items)
        parts: list[Vectors] = []
        for start in range(0, len(items), self.chunk_texts):
            await self._gate.acquire(query=False)
            try:
                parts.append(await self.inner.embed(items[start : start + self.chunk_texts]))
            finally:
                self._gate.release()
        return np.concatenate(parts).astype(np.float32, copy=False)

    async def aclose(self) -> None:
        await self.inner.aclose()

