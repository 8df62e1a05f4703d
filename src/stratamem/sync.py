"""`Memory`: the synchronous facade over `AsyncMemory`, for scripts and notebooks.

It runs the async core on an event loop in a private thread and waits for each call; it holds no
logic of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from stratamem.capture import CaptureResult
from stratamem.clock import Clock
from stratamem.config import Settings
from stratamem.core import AsyncMemory, ProgressFn, Recall
from stratamem.domain import Hit, Message
from stratamem.embed.base import Embedder
from stratamem.layers.service import FlushResult

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="stratamem-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Memory:
    """Synchronous stratamem: `Memory(data_dir=...)`, then `capture`, `search`, `recall`."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        embedder: Embedder | str | None = "settings",
        clock: Clock | None = None,
        verify_embedding: bool = True,
        **overrides: Any,
    ) -> None:
        if overrides:
            base = settings.model_dump() if settings else {}
            settings = Settings(**{**base, **overrides})
        self._portal = _LoopThread()
        try:
            self.core = AsyncMemory.open(
                settings, embedder=embedder, clock=clock, verify_embedding=verify_embedding
            )
        except BaseException:
            self._portal.stop()
            raise

    def capture(
        self, tenant: str, session: str, messages: Sequence[Message | Mapping[str, Any]]
    ) -> CaptureResult:
        return self._portal.run(self.core.capture(tenant, session, messages))

    def import_batches(
        self,
        tenant: str,
        batches: Sequence[tuple[str, Sequence[Message | Mapping[str, Any]]]],
        progress: ProgressFn | None = None,
    ) -> CaptureResult:
        return self._portal.run(self.core.import_batches(tenant, batches, progress))

    def search(self, tenant: str, query: str, **options: Any) -> list[Hit]:
        return self._portal.run(self.core.search(tenant, query, **options))

    def recall(self, tenant: str, query: str, **options: Any) -> Recall:
        return self._portal.run(self.core.recall(tenant, query, **options))

    def flush(self, tenant: str, session: str) -> FlushResult:
        return self._portal.run(self.core.flush(tenant, session))

    def embed_pending(
        self, max_records: int | None = None, progress: ProgressFn | None = None
    ) -> int:
        return self._portal.run(self.core.embed_pending(max_records, progress))

    def reindex(self, progress: ProgressFn | None = None) -> int:
        return self._portal.run(self.core.reindex(progress))

    def erase_session(self, tenant: str, session: str) -> dict[str, int]:
        """See `AsyncMemory.erase_session`."""
        return self._portal.run(self.core.erase_session(tenant, session))

    def erase_tenant(self, tenant: str) -> dict[str, int]:
        """See `AsyncMemory.erase_tenant`."""
        return self._portal.run(self.core.erase_tenant(tenant))

    def stats(self, tenant: str | None = None) -> dict[str, Any]:
        return self._portal.run(self.core.stats(tenant))

    def close(self, drain: bool = False) -> None:
        try:
            self._portal.run(self.core.aclose(drain=drain))
        finally:
            self._portal.stop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
