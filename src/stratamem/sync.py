"""The synchronous library, for scripts and notebooks: `Memory` over the embedded `AsyncMemory`
through the `SyncFacade` (`stratamem.facade`) the service's `Client` shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.capture import CaptureResult
from stratamem.clock import Clock
from stratamem.config import Settings
from stratamem.core import AsyncMemory, ProgressFn
from stratamem.domain import Message
from stratamem.embed.base import Embedder
from stratamem.facade import SyncFacade


class Memory(SyncFacade):
    """Synchronous stratamem: `Memory(data_dir=...)`, then `capture`, `search`, `recall` …"""

    core: AsyncMemory

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
        super().__init__()
        try:
            self.core = AsyncMemory.open(
                settings, embedder=embedder, clock=clock, verify_embedding=verify_embedding
            )
        except BaseException:
            self._portal.stop()
            raise

    def __enter__(self) -> Memory:
        return self

    def import_batches(
        self,
        tenant: str,
        batches: Sequence[tuple[str, Sequence[Message | Mapping[str, Any]]]],
        progress: ProgressFn | None = None,
    ) -> CaptureResult:
        return self.run(self.core.import_batches(tenant, batches, progress))

    def stats(self, tenant: str | None = None) -> dict[str, Any]:
        """Counts of one tenant, or (`None`) of the whole store."""
        return self.run(self.core.stats(tenant))

    def embed_pending(
        self, max_records: int | None = None, progress: ProgressFn | None = None
    ) -> int:
        return self.run(self.core.embed_pending(max_records, progress))

    def reindex(self, progress: ProgressFn | None = None) -> int:
        return self.run(self.core.reindex(progress))

    def erase_tenant(self, tenant: str) -> dict[str, int]:
        """See `AsyncMemory.erase_tenant`."""
        return self.run(self.core.erase_tenant(tenant))

    def export_tenant(self, tenant: str) -> list[dict[str, Any]]:
        """See `AsyncMemory.export_tenant`."""
        return self.run(self.core.export_tenant(tenant))

    def import_export(
        self, lines: Sequence[Mapping[str, Any]], tenant: str | None = None
    ) -> dict[str, int]:
        """See `AsyncMemory.import_export`."""
        return self.run(self.core.import_export(lines, tenant))

    def run_offload(self, *, flush: bool = True) -> int:
        """See `AsyncMemory.run_offload`."""
        return self.run(self.core.run_offload(flush=flush))

    def close(self, drain: bool = False) -> None:
        try:
            self.run(self.core.aclose(drain=drain))
        finally:
            self._portal.stop()
