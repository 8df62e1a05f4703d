"""`AsyncMemory`: the one async core. `stratamem.Memory` is its synchronous facade."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from stratamem import backfill, manual
from stratamem.capture import CaptureResult, build_turns
from stratamem.clock import Clock, SystemClock
from stratamem.config import Settings
from stratamem.domain import (
    Hit,
    Layer,
    MemoryRecord,
    MemoryType,
    Message,
    Profile,
    Recall,
    Scene,
    Scope,
    Turn,
    check_ident,
    memory_type,
)
from stratamem.embed import make_embedder
from stratamem.embed.base import Embedder, is_loaded, preload
from stratamem.embed.fair import FairEmbedder
from stratamem.errors import ConfigError, InvalidInput
from stratamem.inputs import nfc
from stratamem.layers import forgetting, ledger
from stratamem.layers.executors import LayerExecutors
from stratamem.layers.model import FlushResult
from stratamem.layers.service import LayerService
from stratamem.layers.settings import LayerSettings
from stratamem.layers.stable import stable_parts
from stratamem.llm import LLM, LLMClient, LLMSettings
from stratamem.offload import Compaction, DiagramsView, Entry, IngestResult, ReadBack, ToolPair
from stratamem.offload.background import EmbeddedOffload
from stratamem.pipeline.backend import PipelineBackend
from stratamem.retrieval.config import RetrievalConfig
from stratamem.retrieval.render import render_recall, render_stable
from stratamem.retrieval.search import SearchRequest, hybrid_search
from stratamem.store.backlog import BacklogStore
from stratamem.store.core.port import EmbeddingInfo, Filters, Store
from stratamem.store.core.store import SqlCoreStore
from stratamem.store.evidence.port import EvidenceStore
from stratamem.store.layers.port import LayerStore
from stratamem.store.lineage import export
from stratamem.store.lineage.port import Forget, Lineage, LineageStore
from stratamem.store.lineage.rows import (
    CORRECTED,
    FORGOTTEN,
    MEMORY,
    PROFILE,
    PROFILE_ID,
    SCENE,
    Ref,
)
from stratamem.store.opening import RecordStore, open_store, stores_of
from stratamem.store.sqlite.store import SqliteStore

ProgressFn = Callable[[int], None]
T = TypeVar("T")
#: Most records one `turns` or `list_memories` call returns.
MAX_PAGE = 1000
#: The largest turn sequence number a store keeps (a signed 64-bit integer).
MAX_SEQ = 2**63 - 1


def retrieval_config(settings: Settings) -> RetrievalConfig:
    """How search ranks under `settings`: their fusion constant and candidates, else defaults."""
    return RetrievalConfig(candidates=settings.candidates_per_retriever, rrf_k=settings.rrf_k)


class AsyncMemory:
    """Capture, search and recall over one store, with embeddings caught up in the background."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        verify_embedding: bool = True,
        owns_embedder: bool = False,
        llm: LLM | None = None,
        layer_settings: LayerSettings | None = None,
        owns_llm: bool = False,
    ) -> None:
        self.store = store
        self.stores = stores_of(store) if isinstance(store, RecordStore) else None
        """Every store over `store`'s database (`store.opening.Stores`); None over a store that
        keeps memories only."""
        self.layers: LayerStore | None = None if self.stores is None else self.stores.layers
        self.evidence: EvidenceStore | None = None if self.stores is None else self.stores.evidence
        self.backlog: BacklogStore | None = None if self.stores is None else self.stores.backlog
        self.lineage: LineageStore | None = None if self.stores is None else self.stores.lineage
        self.llm = llm
        self._owns_llm = owns_llm
        self.layer_settings = layer_settings or LayerSettings()
        self._owns_embedder = owns_embedder
        self.embedder = embedder
        self.fair_embedder = None if embedder is None else FairEmbedder(embedder)
        """The embedder as every part of this memory calls it: queries (search, recall) before
        background work (catch-up, layers), so a search never waits behind a big import."""
        self.settings = settings or Settings()
        self.retrieval = retrieval_config(self.settings)
        """How `search` ranks: the settings' fusion constant and candidates, else the defaults
        (the evaluation harness swaps in variants)."""
        self.clock = clock or SystemClock()
        self._backfill: backfill.Backfill | None = None
        self._offload: EmbeddedOffload | None = None
        if self.fair_embedder is not None:
            if verify_embedding:
                backfill.bind_if_known(store, self.fair_embedder)
            self._backfill = backfill.Backfill(
                store, self.fair_embedder, self.settings.embed_batch_size
            )

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        embedder: Embedder | str | None = "settings",
        clock: Clock | None = None,
        verify_embedding: bool = True,
        llm: LLM | str | None = "settings",
        layer_settings: LayerSettings | None = None,
    ) -> AsyncMemory:
        """Open the embedded store under `settings.data_dir` with the configured embedder.

        An embedder or LLM passed in stays the caller's to close; one built from settings is
        closed with the memory. `llm="settings"` uses `STRATAMEM_LLM_*` when an endpoint is
        configured there, else the layers run offline.
        """
        settings = settings or Settings()
        owns = isinstance(embedder, str)
        if isinstance(embedder, str):
            spec = settings.embedder if embedder == "settings" else embedder
            embedder = make_embedder(
                spec,
                base_url=settings.embed_base_url,
                api_key=settings.embed_api_key,
                dim=settings.embed_dim,
                batch_size=settings.embed_batch_size,
                onnx_spinning=settings.onnx_spinning,
            )
        owns_llm = isinstance(llm, str)
        if isinstance(llm, str):
            llm_settings = LLMSettings()
            llm = LLMClient(llm_settings, clock=clock) if llm_settings.configured else None
        store = open_store(settings)
        return cls(
            store, embedder, settings, clock, verify_embedding, owns_embedder=owns,
            llm=llm, layer_settings=layer_settings, owns_llm=owns_llm,
        )  # fmt: skip

    # -- capture -----------------------------------------------------------------------------
    async def capture(
        self, tenant: str, session: str, messages: Sequence[Message | Mapping[str, Any]]
    ) -> CaptureResult:
        """Store each message verbatim (idempotently); returns before any embedding is made."""
        turns, skipped = build_turns(
            tenant, session, messages, self.clock.now(), self.settings.max_turn_chars
        )
        return await self._store_turns(tenant, turns, skipped)

    async def _store_turns(self, tenant: str, turns: list[Turn], skipped: int) -> CaptureResult:
        stored = await asyncio.to_thread(self.store.add_turns, Scope(tenant), turns)
        stored_ids = {t.id for t in stored}
        if stored and self._backfill is not None and self.settings.background_embedding:
            self._backfill.poke()
        return CaptureResult(
            ids=[t.id for t in turns],
            stored=[t.id for t in turns if t.id in stored_ids],
            duplicates=[t.id for t in turns if t.id not in stored_ids],
            skipped_empty=skipped,
        )

    async def import_batches(
        self,
        tenant: str,
        batches: Sequence[tuple[str, Sequence[Message | Mapping[str, Any]]]],
        progress: ProgressFn | None = None,
    ) -> CaptureResult:
        """Capture many sessions; every message is validated before the first is stored."""
        now = self.clock.now()
        built = [
            (build_turns(tenant, session, messages, now, self.settings.max_turn_chars), messages)
            for session, messages in batches
        ]
        results = []
        for (turns, skipped), messages in built:
            results.append(await self._store_turns(tenant, turns, skipped))
            if progress is not None:
                progress(len(messages))
        return CaptureResult(
            ids=[i for r in results for i in r.ids],
            stored=[i for r in results for i in r.stored],
            duplicates=[i for r in results for i in r.duplicates],
            skipped_empty=sum(r.skipped_empty for r in results),
        )

    # -- search and recall -------------------------------------------------------------------
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
    ) -> list[Hit]:
        """Hybrid (BM25 + vector, fused by reciprocal rank) search within one tenant."""
        request = SearchRequest(
            query=nfc(query, "the search query"),
            k=k,
            layers=tuple(Layer(layer) for layer in layers),
            filters=Filters(
                types=None if types is None else tuple(memory_type(t) for t in types),
                sessions=None if sessions is None else tuple(sessions),
                since=since,
                until=until,
                as_of=as_of,
            ),
        )
        request.validate()
        vector = None
        if self.fair_embedder is not None:
            vector = (await self.fair_embedder.embed_query([request.query]))[0]
            info = EmbeddingInfo(self.fair_embedder.model, int(vector.shape[0]))
            await asyncio.to_thread(self.store.bind_embedding, info)
        return await hybrid_search(self.store, Scope(tenant), request, vector, self.retrieval)

    async def recall(
        self,
        tenant: str,
        query: str,
        *,
        session: str | None = None,
        k: int | None = None,
        budget_chars: int | None = None,
        stable_budget_chars: int | None = None,
        include_turns: bool = True,
    ) -> Recall:
        """Memories relevant to `query`, rendered for the next model call. With `session`
        (the conversation the call belongs to), its last `recall_recent_turns` turns are left
        out of the hits: the agent has them in its context, and the block has room for more."""
        layers = (Layer.L1, Layer.L0) if include_turns else (Layer.L1,)
        wanted = k or self.settings.recall_k
        recent = self.settings.recall_recent_turns if session and include_turns else 0
        hits = await self.search(tenant, query, k=min(wanted + recent, 100), layers=layers)
        found = len(hits)
        if recent:
            hits = await self._without_recent(tenant, session or "", hits, recent)
        left_out, hits = found - len(hits), hits[:wanted]
        budget = self.settings.recall_budget_chars if budget_chars is None else budget_chars
        stable_budget = (
            self.settings.stable_budget_chars if stable_budget_chars is None
            else stable_budget_chars
        )
        context = render_recall(hits, budget)
        profile, scene_lines = await self._stable_parts(tenant)
        stable = render_stable(profile, scene_lines, stable_budget)
        return Recall(
            hits=hits,
            context=context,
            stable=stable,
            stats={
                "context_chars": len(context),
                "stable_chars": len(stable),
                "session": session,
                "left_out_recent_turns": left_out,
            },
        )

    async def _without_recent(
        self, tenant: str, session: str, hits: list[Hit], recent: int
    ) -> list[Hit]:
        """`hits` less the turns among the last `recent` of `session`."""
        ids = [h.id for h in hits if h.layer is Layer.L0 and h.session == session]
        if not ids:
            return hits
        scope = Scope(tenant)
        seqs = {t.id: t.seq for t in await asyncio.to_thread(self.store.get_turns, scope, ids)}
        newest = max(seqs.values())
        after = await asyncio.to_thread(self.store.list_turns, scope, session, newest, recent)
        if len(after) >= recent:  # even the newest hit is older than the recent turns
            return hits
        first_recent = newest + len(after) - recent + 1
        return [h for h in hits if h.id not in seqs or seqs[h.id] < first_recent]

    async def _stable_parts(self, tenant: str) -> tuple[str | None, list[str]]:
        if self.layers is None:
            return None, []
        return await asyncio.to_thread(stable_parts, self.layers, Scope(tenant))

    # -- layers ------------------------------------------------------------------------------
    def layer_service(self) -> LayerService:
        """The memory layers over this memory's store, LLM (or offline mode) and embedder."""
        return LayerService(
            self.store,
            _on_sql(self.layers),
            _on_sql(self.evidence),
            llm=self.llm,
            embedder=self.fair_embedder,
            settings=self.layer_settings,
            clock=self.clock,
            candidates_per_retriever=self.settings.candidates_per_retriever,
            embed_batch_size=self.settings.embed_batch_size,
        )

    def layer_executors(self, backend: PipelineBackend | None = None) -> LayerExecutors:
        """The layers' pipeline executors over this memory's stores (`backend` re-arms early
        L2 timers)."""
        return LayerExecutors(self.layer_service(), _on_sql(self.backlog), backend)

    async def flush(self, tenant: str, session: str) -> FlushResult:
        """Run the layers for a session now (L1 until caught up, L2, L3) and wait."""
        return await self.layer_service().flush(tenant, session)

    async def request_flush(self, tenant: str, session: str, now: float) -> None:
        """Record a flush request for the pipeline: owed until a flush task completes it, so
        the backlog scheduler submits it again if its task is lost or dropped."""
        check_ident(session, "session")
        backlog = _on_sql(self.backlog)
        await asyncio.to_thread(backlog.request_flush, Scope(tenant), session, now)

    async def turns(
        self, tenant: str, session: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Turn]:
        """A session's captured turns, verbatim, in order: those with `seq > after_seq`."""
        check_ident(session, "session")
        if not 1 <= limit <= MAX_PAGE or not 0 <= after_seq <= MAX_SEQ:
            raise InvalidInput(f"limit must be 1-{MAX_PAGE} and after_seq 0-{MAX_SEQ}")
        return await asyncio.to_thread(
            self.store.list_turns, Scope(tenant), session, after_seq, limit
        )

    # -- memories, stated and read directly -------------------------------------------------
    @overload
    async def add_memory(
        self,
        tenant: str,
        content: str,
        *,
        type: MemoryType | str = MemoryType.PERSONA,
        session: str | None = None,
        priority: int = 50,
        metadata: Mapping[str, Any] | None = None,
        tell_new: Literal[False] = False,
    ) -> MemoryRecord: ...

    @overload
    async def add_memory(
        self,
        tenant: str,
        content: str,
        *,
        type: MemoryType | str = MemoryType.PERSONA,
        session: str | None = None,
        priority: int = 50,
        metadata: Mapping[str, Any] | None = None,
        tell_new: Literal[True],
    ) -> tuple[MemoryRecord, bool]: ...

    async def add_memory(
        self,
        tenant: str,
        content: str,
        *,
        type: MemoryType | str = MemoryType.PERSONA,
        session: str | None = None,
        priority: int = 50,
        metadata: Mapping[str, Any] | None = None,
        tell_new: bool = False,
    ) -> MemoryRecord | tuple[MemoryRecord, bool]:
        """Remember what the caller states directly (mode `manual`); stating it again (with the
        same metadata) returns the memory already known. With `tell_new`, also whether the
        memory was new (the edges answer 201 or 200 by it)."""
        record, created = await asyncio.to_thread(
            manual.add_memory, self.store, Scope(tenant), content,
            memory_type=memory_type(type), now=self.clock.now(),
            max_chars=self.settings.max_turn_chars, session=session, priority=priority,
            metadata=metadata,
        )  # fmt: skip
        if created:
            await self._embed_added(tenant)
            self.start_background()
        return (record, created) if tell_new else record

    async def _embed_added(self, tenant: str) -> None:
        """A memory the caller just added is found by meaning as soon as the call returns."""
        if self.fair_embedder is not None and self.settings.background_embedding:
            await backfill.embed_added(
                self.store, self.fair_embedder, self.settings.embed_batch_size, tenant
            )

    async def list_memories(
        self,
        tenant: str,
        *,
        types: Sequence[MemoryType | str] | None = None,
        sessions: Sequence[str] | None = None,
        as_of: float | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        """Current memories (or those valid at `as_of`), newest first."""
        if not 1 <= limit <= MAX_PAGE or offset < 0:
            raise InvalidInput(f"limit must be 1-{MAX_PAGE} and offset at least 0")
        checked = None if sessions is None else tuple(check_ident(s, "session") for s in sessions)
        filters = Filters(
            types=None if types is None else tuple(memory_type(t) for t in types),
            sessions=checked,
            as_of=as_of,
        )
        return await asyncio.to_thread(
            self.store.list_memories, Scope(tenant), filters, limit, offset
        )

    async def get_memory(self, tenant: str, memory_id: str) -> MemoryRecord:
        """One memory with its provenance and validity (`NotFound` otherwise)."""
        return await asyncio.to_thread(self.store.get_memory, Scope(tenant), memory_id)

    async def update_memory(
        self,
        tenant: str,
        memory_id: str,
        *,
        content: str | None = None,
        type: MemoryType | str | None = None,
        priority: int | None = None,
    ) -> MemoryRecord:
        """Correct a current memory: a new version (mode `manual`) supersedes it."""
        updated = await asyncio.to_thread(
            manual.update_memory, self.store, Scope(tenant), memory_id, now=self.clock.now(),
            max_chars=self.settings.max_turn_chars, content=content,
            memory_type=None if type is None else memory_type(type), priority=priority,
        )  # fmt: skip
        if updated.id != memory_id:
            await self._mark_stale(tenant, memory_id, CORRECTED)
        self.start_background()
        return updated

    async def forget_memory(self, tenant: str, memory_id: str) -> MemoryRecord:
        """End a memory's validity now: out of search and recall, kept in its history."""
        forgotten = await asyncio.to_thread(
            manual.forget_memory, self.store, Scope(tenant), memory_id, now=self.clock.now()
        )
        await self._mark_stale(tenant, memory_id, FORGOTTEN)
        return forgotten

    async def _mark_stale(self, tenant: str, memory_id: str, reason: str) -> None:
        """What was built on a memory just corrected or forgotten is rebuilt by the layers."""
        if self.lineage is not None:
            await asyncio.to_thread(self.lineage.mark_stale, Scope(tenant), [memory_id], reason,
                                    self.clock.now())  # fmt: skip

    async def memory_history(self, tenant: str, memory_id: str) -> list[MemoryRecord]:
        """Every version of a memory, oldest first."""
        return await asyncio.to_thread(
            self._layer_store().memory_history, Scope(tenant), memory_id
        )

    async def scenes(self, tenant: str) -> list[Scene]:
        """The current L2 scenes, hottest first."""
        return await asyncio.to_thread(self._layer_store().current_scenes, Scope(tenant))

    async def scene_history(self, tenant: str, scene_id: str) -> list[Scene]:
        """Every version of one scene, oldest first."""
        return await asyncio.to_thread(self._layer_store().scene_history, Scope(tenant), scene_id)

    async def profile(self, tenant: str) -> Profile | None:
        """The L3 profile, or None until the layers have written one."""
        return await asyncio.to_thread(self._layer_store().profile, Scope(tenant))

    async def profile_history(self, tenant: str) -> list[Profile]:
        """Every version of the profile, oldest first."""
        return await asyncio.to_thread(self._layer_store().profile_history, Scope(tenant))

    def _layer_store(self) -> LayerStore:
        return _on_sql(self.layers)

    # -- context offload -------------------------------------------------------------------
    @property
    def embedded_offload(self) -> EmbeddedOffload:
        """Context offload over this memory's store; its stages run in this process."""
        if self._offload is None:
            if self.stores is None:
                raise ConfigError("context offload needs a SQLite or PostgreSQL store")
            self._offload = EmbeddedOffload(self.stores.offload, self.clock, self.llm)
        return self._offload

    async def offload_tool_results(
        self, tenant: str, session: str, pairs: Sequence[ToolPair | Mapping[str, Any]]
    ) -> IngestResult:
        """Finished tool calls to offload (idempotent by `call_id`); the summaries, task
        judgment and diagrams run in the background."""
        result = await self.embedded_offload.offload.ingest(tenant, session, pairs)
        self.embedded_offload.poke()
        return result

    async def offload_user_message(
        self,
        tenant: str,
        session: str,
        text: str,
        *,
        id: str | None = None,
        timestamp: float | None = None,
    ) -> str:
        """A user message, a possible task boundary; returns its id."""
        found = await self.embedded_offload.offload.user_message(
            tenant, session, text, message_id=id, timestamp=timestamp
        )
        self.embedded_offload.poke()
        return found

    async def compact(
        self,
        tenant: str,
        session: str,
        messages: Sequence[Mapping[str, Any]],
        budget_tokens: int,
    ) -> Compaction:
        """`messages` (OpenAI chat format) compacted for `budget_tokens`."""
        return await self.embedded_offload.offload.compact(
            tenant, session, messages, budget_tokens
        )

    async def offload_entries(self, tenant: str, session: str) -> list[Entry]:
        """The session's offloaded calls: summary, 0-10 score, ref, task and diagram node."""
        return await self.embedded_offload.offload.entries(tenant, session)

    async def offload_diagrams(self, tenant: str, session: str) -> DiagramsView:
        """The session's tasks and their Mermaid diagrams."""
        return await self.embedded_offload.offload.diagrams(tenant, session)

    async def read_back(
        self, tenant: str, ref_id: str, *, query: str | None = None, max_tokens: int | None = None
    ) -> ReadBack:
        """The exact tool result behind a ref, or the slice around `query`."""
        return await self.embedded_offload.offload.read_back(
            tenant, ref_id, query=query, max_tokens=max_tokens
        )

    async def run_offload(self, *, flush: bool = True) -> int:
        """Run the offload stages that wait now (with `flush`, those waiting for a timer too),
        instead of in the background; returns how many ran."""
        return len((await self.embedded_offload.run(flush=flush)).done)

    # -- embeddings --------------------------------------------------------------------------
    async def embed_pending(
        self, max_records: int | None = None, progress: ProgressFn | None = None
    ) -> int:
        """Embed what capture left pending, now; returns how many records were embedded."""
        if self.fair_embedder is None:
            return 0
        total = 0
        while max_records is None or total < max_records:
            step = self.settings.embed_batch_size * 8
            if max_records is not None:
                step = min(step, max_records - total)
            done = await backfill.embed_pending(
                self.store, self.fair_embedder, self.settings.embed_batch_size, step
            )
            total += done
            if progress is not None and done:
                progress(done)
            if done < step:
                break
        return total

    @property
    def embedder_ready(self) -> bool:
        """False while the embedder has a model that is not loaded yet (it loads on first use,
        or now with `load_embedder`)."""
        return self.embedder is None or is_loaded(self.embedder)

    async def load_embedder(self) -> None:
        """Load the embedder's model now (a worker thread), so the first search pays no load."""
        if self.embedder is not None:
            await preload(self.embedder)

    def start_background(self) -> None:
        """Catch up in the background on what is pending, e.g. left by a process that died."""
        if self._backfill is not None and self.settings.background_embedding:
            self._backfill.poke()

    async def reindex(self, progress: ProgressFn | None = None) -> int:
        """Drop every vector and embed everything again with the configured embedder."""
        if self.embedder is None:
            await asyncio.to_thread(self.store.reset_embeddings, None)
            return 0
        # An empty batch has the model's width, which some know only once loaded or called.
        width = (await self.embedder.embed([])).shape[1]
        info = EmbeddingInfo(self.embedder.model, int(width))
        await asyncio.to_thread(self.store.reset_embeddings, info)
        return await self.embed_pending(progress=progress)

    async def erase_session(self, tenant: str, session: str) -> dict[str, int]:
        """Forget a conversation: its turns, its layer and offload records, and what was
        drawn from it, in one transaction (`docs/forgetting.md`): memories drawn only from it
        are erased, those drawn partly are derived again from the turns left; every scene and
        profile version built from an erased memory is purged and the current ones written
        again without it. Returns counts (`turns`, `memories`, `other`, `rederived`,
        `purged_versions`, `rebuilt`)."""
        check_ident(tenant, "tenant")
        check_ident(session, "session")
        return await self.forget(tenant, sessions=(session,))

    async def erase_turn(self, tenant: str, turn_id: str) -> dict[str, int]:
        """Forget one captured turn and what was drawn from it (as `erase_session`)."""
        check_ident(tenant, "tenant")
        return await self.forget(tenant, turn_ids=(turn_id,))

    async def erase_memory(self, tenant: str, memory_id: str) -> dict[str, int]:
        """Forget one memory for good: it and the versions it consumed leave its history,
        with what was built from it (as `erase_session`); the turns it came from stay."""
        check_ident(tenant, "tenant")
        await asyncio.to_thread(self.store.get_memory, Scope(tenant), memory_id)  # NotFound
        return await self.forget(tenant, memory_ids=(memory_id,))

    async def forget(
        self,
        tenant: str,
        *,
        sessions: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        memory_ids: Sequence[str] = (),
    ) -> dict[str, int]:
        """Erase sessions, turns and memories, and everything drawn from them, at once."""
        lineage = _on_sql(self.lineage)
        request = Forget(self.clock.now(), tuple(sessions), tuple(turn_ids), tuple(memory_ids))
        return await asyncio.to_thread(
            lineage.forget, Scope(tenant), request, forgetting.rebuilder(self.layer_settings)
        )

    async def export_tenant(self, tenant: str) -> list[dict[str, Any]]:
        """Everything held about a tenant, as the lines of a versioned JSONL export (turns,
        memories with their versions, scenes, profile, lineage, layer state, offload entries
        and refs; the embedding model named): `store/lineage/export.py`."""
        check_ident(tenant, "tenant")
        store = self._sql_store()
        kind = "sqlite" if isinstance(store, SqliteStore) else "postgres"
        return await asyncio.to_thread(lambda: list(export.export_tenant(store, Scope(tenant),
                                                                         kind)))  # fmt: skip

    async def import_export(
        self, lines: Sequence[Mapping[str, Any]], tenant: str | None = None
    ) -> dict[str, int]:
        """Load an export (`export_tenant`'s lines) under its tenant or `tenant`, which must
        hold nothing here yet; ids and validity are kept, and the records are embedded again
        with this store's model. Counts of rows by table."""
        if tenant is not None:
            check_ident(tenant, "tenant")
        store = self._sql_store()
        counts = await asyncio.to_thread(
            export.import_tenant, store, [dict(line) for line in lines], tenant
        )
        self.start_background()
        return counts

    def _sql_store(self) -> SqlCoreStore:
        if not isinstance(self.store, SqlCoreStore):
            raise ConfigError("export and import need a SQLite or PostgreSQL store")
        return self.store

    async def memory_lineage(self, tenant: str, memory_id: str) -> Lineage:
        """Why a memory is known: the turns and memories it came from, and what superseded it
        and the scene and profile versions built from it."""
        return await self._lineage(tenant, Ref(MEMORY, memory_id))

    async def scene_lineage(self, tenant: str, scene_id: str, version: int = 0) -> Lineage:
        """The memories a scene version (0: the current) was built from, and the profile
        versions built from it."""
        return await self._lineage(tenant, Ref(SCENE, scene_id, version))

    async def profile_lineage(self, tenant: str, version: int = 0) -> Lineage:
        """The memories and scene versions a profile version (0: the current) came from."""
        return await self._lineage(tenant, Ref(PROFILE, PROFILE_ID, version))

    async def _lineage(self, tenant: str, ref: Ref) -> Lineage:
        if ref.version < 0:
            raise InvalidInput(f"a version is 0 (the current) or more, not {ref.version}")
        return await asyncio.to_thread(_on_sql(self.lineage).lineage, Scope(tenant), ref)

    async def erase_tenant(self, tenant: str) -> dict[str, int]:
        """Forget everything of a tenant: turns, memories, scenes, profile, offload records."""
        check_ident(tenant, "tenant")
        return await asyncio.to_thread(self.store.erase_tenant, Scope(tenant))

    async def stats(self, tenant: str | None = None) -> dict[str, Any]:
        scope = None if tenant is None else Scope(tenant)
        result = await asyncio.to_thread(self.store.stats, scope)
        if scope is not None and self.layers is not None:  # the turn ledger, per session
            sessions = await asyncio.to_thread(self.layers.outcome_counts, scope)
            result["turn_outcomes"] = ledger.totals(sessions)
            result["turn_outcomes_by_session"] = sessions
        if self._backfill is not None:
            result["embedding_last_error"] = self._backfill.last_error
        return result

    async def aclose(self, drain: bool = False) -> None:
        """Stop background work; with `drain`, embed what is still pending first."""
        if self._backfill is not None:
            await self._backfill.stop()
        if self._offload is not None:
            await self._offload.stop()
        if drain:
            await self.embed_pending()
        if self.embedder is not None and self._owns_embedder:
            await self.embedder.aclose()
        if self.llm is not None and self._owns_llm:
            await self.llm.aclose()
        self.store.close()


def _on_sql(records: T | None) -> T:
    """A record family's store, which only a SQL store has (the memory layers' records, the
    pipeline's evidence, the backlog's queries)."""
    if records is None:
        raise ConfigError("the memory layers need a SQLite or PostgreSQL store")
    return records
