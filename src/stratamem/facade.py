"""`SyncFacade`: any `MemoryAPI` made synchronous, for scripts and notebooks.

It runs the async API on an event loop in a private thread and waits for each call; it holds no
logic of its own, so the embedded memory (`stratamem.sync.Memory` over `AsyncMemory`) and the
service's client (`stratamem.client.Client` over `AsyncClient`) share it. It imports only the
records the API answers with, so the client does not load the embedded system.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from stratamem.capture import CaptureResult
from stratamem.domain import Hit, MemoryRecord, Message, Profile, Recall, Scene, Turn
from stratamem.layers.model import FlushResult
from stratamem.offload.readback import ReadBack
from stratamem.offload.results import Compaction, DiagramsView, IngestResult
from stratamem.protocol import MemoryAPI
from stratamem.store.lineage.port import Lineage
from stratamem.store.offload.records import Entry, ToolPair

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


class SyncFacade:
    """Each method waits for the same-named coroutine of `core` (see `MemoryAPI`)."""

    core: MemoryAPI

    def __init__(self) -> None:
        self._portal = _LoopThread()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine over `core` on the facade's loop and wait for it (from any thread
        without a running loop); adapters call the async core through this."""
        return self._portal.run(coro)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """The same from async code running on another event loop."""
        future = asyncio.run_coroutine_threadsafe(coro, self._portal.loop)
        return await asyncio.wrap_future(future)

    def capture(
        self, tenant: str, session: str, messages: Sequence[Message | Mapping[str, Any]]
    ) -> CaptureResult:
        return self.run(self.core.capture(tenant, session, messages))

    def search(self, tenant: str, query: str, **options: Any) -> list[Hit]:
        return self.run(self.core.search(tenant, query, **options))

    def recall(self, tenant: str, query: str, **options: Any) -> Recall:
        return self.run(self.core.recall(tenant, query, **options))

    def turns(self, tenant: str, session: str, **options: Any) -> list[Turn]:
        return self.run(self.core.turns(tenant, session, **options))

    def flush(self, tenant: str, session: str) -> FlushResult:
        return self.run(self.core.flush(tenant, session))

    def stats(self, tenant: str) -> dict[str, Any]:
        return self.run(self.core.stats(tenant))

    def erase_session(self, tenant: str, session: str) -> dict[str, int]:
        """See `AsyncMemory.erase_session`."""
        return self.run(self.core.erase_session(tenant, session))

    def erase_turn(self, tenant: str, turn_id: str) -> dict[str, int]:
        """See `AsyncMemory.erase_turn`."""
        return self.run(self.core.erase_turn(tenant, turn_id))

    def erase_memory(self, tenant: str, memory_id: str) -> dict[str, int]:
        """See `AsyncMemory.erase_memory`."""
        return self.run(self.core.erase_memory(tenant, memory_id))

    def memory_lineage(self, tenant: str, memory_id: str) -> Lineage:
        return self.run(self.core.memory_lineage(tenant, memory_id))

    def scene_lineage(self, tenant: str, scene_id: str, version: int = 0) -> Lineage:
        return self.run(self.core.scene_lineage(tenant, scene_id, version))

    def profile_lineage(self, tenant: str, version: int = 0) -> Lineage:
        return self.run(self.core.profile_lineage(tenant, version))

    def add_memory(self, tenant: str, content: str, **options: Any) -> MemoryRecord:
        return self.run(self.core.add_memory(tenant, content, **options))

    def list_memories(self, tenant: str, **options: Any) -> list[MemoryRecord]:
        return self.run(self.core.list_memories(tenant, **options))

    def get_memory(self, tenant: str, memory_id: str) -> MemoryRecord:
        return self.run(self.core.get_memory(tenant, memory_id))

    def update_memory(self, tenant: str, memory_id: str, **changes: Any) -> MemoryRecord:
        return self.run(self.core.update_memory(tenant, memory_id, **changes))

    def forget_memory(self, tenant: str, memory_id: str) -> MemoryRecord:
        return self.run(self.core.forget_memory(tenant, memory_id))

    def memory_history(self, tenant: str, memory_id: str) -> list[MemoryRecord]:
        return self.run(self.core.memory_history(tenant, memory_id))

    def scenes(self, tenant: str) -> list[Scene]:
        return self.run(self.core.scenes(tenant))

    def scene_history(self, tenant: str, scene_id: str) -> list[Scene]:
        return self.run(self.core.scene_history(tenant, scene_id))

    def profile(self, tenant: str) -> Profile | None:
        return self.run(self.core.profile(tenant))

    def profile_history(self, tenant: str) -> list[Profile]:
        return self.run(self.core.profile_history(tenant))

    def offload_tool_results(
        self, tenant: str, session: str, pairs: Sequence[ToolPair | Mapping[str, Any]]
    ) -> IngestResult:
        return self.run(self.core.offload_tool_results(tenant, session, pairs))

    def offload_user_message(self, tenant: str, session: str, text: str, **options: Any) -> str:
        return self.run(self.core.offload_user_message(tenant, session, text, **options))

    def compact(
        self, tenant: str, session: str, messages: Sequence[Mapping[str, Any]], budget_tokens: int
    ) -> Compaction:
        return self.run(self.core.compact(tenant, session, messages, budget_tokens))

    def offload_entries(self, tenant: str, session: str) -> list[Entry]:
        return self.run(self.core.offload_entries(tenant, session))

    def offload_diagrams(self, tenant: str, session: str) -> DiagramsView:
        return self.run(self.core.offload_diagrams(tenant, session))

    def read_back(self, tenant: str, ref_id: str, **options: Any) -> ReadBack:
        return self.run(self.core.read_back(tenant, ref_id, **options))

    def close(self) -> None:
        try:
            self.run(self.core.aclose())
        finally:
            self._portal.stop()

    def __enter__(self) -> SyncFacade:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
