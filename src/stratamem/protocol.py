"""`MemoryAPI`: what the embedded memory and the service's client both offer.

`AsyncMemory` (the embedded store, in this process) and `stratamem.client.AsyncClient` (a
`stratamem serve` over HTTP) implement it with the same names, arguments and records, so code
written against one runs against the other by changing the constructor. `stratamem.Memory` and
`stratamem.client.Client` are the same synchronous facade over either (`stratamem.facade`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from stratamem.capture import CaptureResult
from stratamem.domain import (
    Hit,
    Layer,
    MemoryRecord,
    MemoryType,
    Message,
    Profile,
    Recall,
    Scene,
    Turn,
)
from stratamem.layers.model import FlushResult
from stratamem.offload.readback import ReadBack
from stratamem.offload.results import Compaction, DiagramsView, IngestResult
from stratamem.store.lineage.port import Lineage
from stratamem.store.offload.records import Entry, ToolPair


class MemoryAPI(Protocol):
    """Every call names its tenant; a client checks it against its key's tenant."""

    async def capture(
        self, tenant: str, session: str, messages: Sequence[Message | Mapping[str, Any]]
    ) -> CaptureResult: ...

    async def search(
        self,
        tenant: str,
        query: str,
        *,
        k: int = 10,
        layers: Sequence[Layer | str] = (Layer.L1, Layer.L0),
        types: Sequence[MemoryType | str] | None = None,
        sessions: Sequence[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        as_of: float | None = None,
    ) -> list[Hit]: ...

    async def recall(
        self,
        tenant: str,
        query: str,
        *,
        session: str | None = None,
        k: int | None = None,
        budget_chars: int | None = None,
        include_turns: bool = True,
    ) -> Recall: ...

    async def turns(
        self, tenant: str, session: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Turn]: ...

    async def flush(self, tenant: str, session: str) -> FlushResult: ...

    async def stats(self, tenant: str) -> dict[str, Any]: ...

    async def erase_session(self, tenant: str, session: str) -> dict[str, int]: ...

    async def erase_turn(self, tenant: str, turn_id: str) -> dict[str, int]: ...

    async def erase_memory(self, tenant: str, memory_id: str) -> dict[str, int]: ...

    async def memory_lineage(self, tenant: str, memory_id: str) -> Lineage: ...

    async def scene_lineage(self, tenant: str, scene_id: str, version: int = 0) -> Lineage: ...

    async def profile_lineage(self, tenant: str, version: int = 0) -> Lineage: ...

    async def add_memory(
        self,
        tenant: str,
        content: str,
        *,
        type: MemoryType | str = MemoryType.PERSONA,
        session: str | None = None,
        priority: int = 50,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryRecord: ...

    async def list_memories(
        self,
        tenant: str,
        *,
        types: Sequence[MemoryType | str] | None = None,
        sessions: Sequence[str] | None = None,
        as_of: float | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[MemoryRecord]: ...

    async def get_memory(self, tenant: str, memory_id: str) -> MemoryRecord: ...

    async def update_memory(
        self,
        tenant: str,
        memory_id: str,
        *,
        content: str | None = None,
        type: MemoryType | str | None = None,
        priority: int | None = None,
    ) -> MemoryRecord: ...

    async def forget_memory(self, tenant: str, memory_id: str) -> MemoryRecord: ...

    async def memory_history(self, tenant: str, memory_id: str) -> list[MemoryRecord]: ...

    async def scenes(self, tenant: str) -> list[Scene]: ...

    async def scene_history(self, tenant: str, scene_id: str) -> list[Scene]: ...

    async def profile(self, tenant: str) -> Profile | None: ...

    async def profile_history(self, tenant: str) -> list[Profile]: ...

    async def offload_tool_results(
        self, tenant: str, session: str, pairs: Sequence[ToolPair | Mapping[str, Any]]
    ) -> IngestResult: ...

    async def offload_user_message(
        self,
        tenant: str,
        session: str,
        text: str,
        *,
        id: str | None = None,
        timestamp: float | None = None,
    ) -> str: ...

    async def compact(
        self,
        tenant: str,
        session: str,
        messages: Sequence[Mapping[str, Any]],
        budget_tokens: int,
    ) -> Compaction: ...

    async def offload_entries(self, tenant: str, session: str) -> list[Entry]: ...

    async def offload_diagrams(self, tenant: str, session: str) -> DiagramsView: ...

    async def read_back(
        self, tenant: str, ref_id: str, *, query: str | None = None, max_tokens: int | None = None
    ) -> ReadBack: ...

    async def aclose(self) -> None: ...
