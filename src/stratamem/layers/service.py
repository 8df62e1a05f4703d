"""`LayerService`: runs L1, L2 and L3 for a tenant, with an LLM or in the offline mode.

Each stage is prompt → call → parse → validate → apply, as small functions in the stage modules;
this module only sequences them and commits. A stage reads its state (session cursor, tenant
mark), does its slow work outside any transaction, and commits everything in one fenced
transaction that also checks the state has not moved and writes the task's receipt. A failed
stage writes nothing but a failure record (with the raw replies), so turns and cursor stay put.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from stratamem import backfill
from stratamem.clock import Clock, SystemClock
from stratamem.domain import MemoryRecord, MemoryType, Mode, Profile, Scene, Scope, Turn
from stratamem.embed.base import Embedder
from stratamem.errors import (
    ConfigError,
    EmbeddingError,
    InvalidInput,
    LLMError,
    StageOutputRejected,
)
from stratamem.layers import l1_extract, l1_reconcile, l2_scenes, l3_profile, offline
from stratamem.layers.model import NewMemory, Reconciled, StageResult
from stratamem.layers.schemas import ProfileDoc
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLM, LLMHTTPError, LLMOutputInvalid
from stratamem.llm.prompts import load_prompt
from stratamem.store.base import Fence, Filters, Store
from stratamem.store.layers_base import Failure, L1Commit, L2Commit, L3Commit, LayerStore

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
MAX_FLUSH_BATCHES = 1000
_RAW_EXCERPT = 300


@dataclass(frozen=True, slots=True)
class Run:
    """Who is running a stage: the task id (receipts, stable ids) and its fencing token."""

    tenant: str
    task_id: str
    session: str | None = None
    fence: Fence | None = None

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant)


@dataclass(frozen=True, slots=True)
class FlushResult:
    l1: list[StageResult] = field(default_factory=list)
    l2: StageResult | None = None
    l3: StageResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "l1": [r.to_json() for r in self.l1],
            "l2": None if self.l2 is None else self.l2.to_json(),
            "l3": None if self.l3 is None else self.l3.to_json(),
        }


class LayerService:
    """The memory layers over one store; `llm=None` runs the offline mode."""

    def __init__(
        self,
        store: Store,
        layers: LayerStore,
        *,
        llm: LLM | None,
        embedder: Embedder | None = None,
        settings: LayerSettings | None = None,
        clock: Clock | None = None,
        candidates_per_retriever: int = 50,
        embed_batch_size: int = 64,
    ) -> None:
        self.store = store
        self.layers = layers
        self.llm = llm
        self.embedder = embedder
        self.settings = settings or LayerSettings()
        self.clock = clock or SystemClock()
        self._candidates = candidates_per_retriever
        self._embed_batch = embed_batch_size

    @property
    def mode(self) -> Mode:
        return Mode.OFFLINE if self.llm is None else Mode.LLM

    # -- L1 ----------------------------------------------------------------------------------
    async def run_l1(self, run: Run) -> StageResult:
        """Extract and reconcile the next batch of a session's turns; move its cursor."""
        session = _session_of(run)
        done = await self._replayed(run)
        if done is not None:
            return done
        state = await asyncio.to_thread(self.layers.session_state, run.scope, session)
        batch = await asyncio.to_thread(
            self.store.list_turns, run.scope, session, state.cursor_seq,
            self.settings.max_batch_turns,
        )  # fmt: skip
        if not batch:
            return StageResult("L1", self.mode, skipped=True)
        background = await self._background(run.scope, session, state.cursor_seq)
        proposed = l1_reconcile.unique(await self._extract(run, batch, background))
        plan = await self._reconcile(run, proposed, f"{session}:{state.cursor_seq}")
        counts = {"turns": len(batch), **plan.counts}
        result = StageResult("L1", self.mode, changed=bool(plan.memories), counts=counts)
        commit = L1Commit(
            session=session,
            task_id=run.task_id,
            expected_cursor=state.cursor_seq,
            new_cursor=batch[-1].seq,
            now=self.clock.now(),
            memories=plan.memories,
            supersedes=plan.supersedes,
            result=result.to_json(),
        )
        await asyncio.to_thread(self.layers.commit_l1, run.scope, commit, run.fence)
        await self._embed_new(len(plan.memories))
        return result

    async def _background(self, scope: Scope, session: str, cursor: int) -> list[Turn]:
        shown = self.settings.context_turns
        if shown == 0 or cursor == 0:
            return []
        start = max(0, cursor - shown)
        return await asyncio.to_thread(self.store.list_turns, scope, session, start, cursor - start)

    async def _extract(
        self, run: Run, batch: Sequence[Turn], background: Sequence[Turn]
    ) -> list[NewMemory]:
        limit = self.settings.max_memories_per_batch
        if self.llm is None:
            return offline.extract(batch, limit)
        prompt = load_prompt("l1_extract")
        messages, aliases = l1_extract.extraction_messages(prompt, batch, background, self.settings)
        reply = await self._ask(run, l1_extract.STAGE, messages, l1_extract.bound_schema(aliases))
        return l1_extract.to_new_memories(reply, aliases, batch, limit)

    async def _reconcile(
        self, run: Run, proposed: Sequence[NewMemory], id_seed: str
    ) -> l1_reconcile.L1Plan:
        neighbours = await l1_reconcile.find_neighbours(
            self.store, self.embedder, run.scope, proposed, self.settings.neighbours,
            self._candidates,
        )  # fmt: skip
        decisions = await self._decide(run, proposed, neighbours)
        existing = {m.id: m for group in neighbours for m in group}
        made_by = "offline@v1" if self.llm is None else load_prompt("l1_extract").tag
        return l1_reconcile.plan(run.scope, _session_of(run), proposed, decisions, existing,
                                 id_seed, self.clock.now(), self.mode, made_by)  # fmt: skip

    async def _decide(
        self,
        run: Run,
        proposed: Sequence[NewMemory],
        neighbours: Sequence[Sequence[MemoryRecord]],
    ) -> list[Reconciled]:
        if self.llm is None or not l1_reconcile.needs_model(neighbours):
            return l1_reconcile.offline_decisions(proposed, neighbours)
        prompt = load_prompt("l1_reconcile")
        messages, view = l1_reconcile.reconcile_messages(prompt, proposed, neighbours)
        schema = l1_reconcile.bound_schema(view)
        reply = await self._ask(run, l1_reconcile.STAGE, messages, schema)
        return l1_reconcile.decisions_from(reply, view, len(proposed))

    async def _embed_new(self, count: int) -> None:
        """Embed the new memories now, so the next reconciliation finds them by vector too."""
        if self.embedder is None or count == 0:
            return
        try:
            await backfill.embed_pending(self.store, self.embedder, self._embed_batch, count)
        except EmbeddingError as exc:  # committed already; the background catch-up retries
            log.warning("embedding new memories failed, left to the catch-up: %s", exc)

    # -- L2 ----------------------------------------------------------------------------------
    async def run_l2(self, run: Run) -> StageResult:
        """Fold the memories changed since the last L2 into the tenant's scenes."""
        done = await self._replayed(run)
        if done is not None:
            return done
        tenant = await asyncio.to_thread(self.layers.tenant_state, run.scope)
        changed, mark = await asyncio.to_thread(
            self.layers.changed_memories, run.scope, tenant.l2_mark, self.settings.l2_max_memories
        )
        if mark == tenant.l2_mark:
            return StageResult("L2", self.mode, skipped=True)
        scenes = await asyncio.to_thread(self.layers.current_scenes, run.scope)
        versions = await self._consolidate(run, scenes, changed) if changed else []
        counts = {"memories": len(changed), "scene_versions": len(versions)}
        result = StageResult("L2", self.mode, changed=bool(versions), counts=counts)
        commit = L2Commit(run.task_id, run.session, tenant.l2_mark, mark, self.clock.now(),
                          versions, result.to_json())  # fmt: skip
        await asyncio.to_thread(self.layers.commit_l2, run.scope, commit, run.fence)
        return result

    async def _consolidate(
        self, run: Run, scenes: Sequence[Scene], changed: Sequence[MemoryRecord]
    ) -> list[Scene]:
        ctx = l2_scenes.SceneContext(run.scope, self.clock.now(), self.mode, run.task_id,
                                     self.settings)  # fmt: skip
        if self.llm is None:
            return l2_scenes.offline_scenes(scenes, changed, ctx)
        prompt = load_prompt("l2_scenes")
        messages, view = l2_scenes.scene_messages(prompt, scenes, changed, self.settings)
        schema = l2_scenes.bound_schema(view, self.settings)
        reply = await self._ask(run, l2_scenes.STAGE, messages, schema)
        return l2_scenes.apply_ops(reply, view, scenes, ctx)

    # -- L3 ----------------------------------------------------------------------------------
    async def run_l3(self, run: Run) -> StageResult:
        """Write the tenant's profile anew from its scenes (a new version only if it changed)."""
        done = await self._replayed(run)
        if done is not None:
            return done
        if not await self._l3_has_news(run.scope):
            return StageResult("L3", self.mode, skipped=True)
        read_at = self.clock.now()
        current = await asyncio.to_thread(self.layers.profile, run.scope)
        body = await self._synthesise(run, current)
        changed = bool(body) and (current is None or body != current.body)
        profile = None
        if changed:
            version = 1 if current is None else current.version + 1
            profile = Profile(run.tenant, body, version, self.clock.now(), self.mode)
        result = StageResult("L3", self.mode, changed=changed, counts={"chars": len(body)})
        commit = L3Commit(run.task_id, self.clock.now(), profile, result.to_json(), read_at)
        await asyncio.to_thread(self.layers.commit_l3, run.scope, commit, run.fence)
        return result

    async def _l3_has_news(self, scope: Scope) -> bool:
        """Whether anything the profile is written from changed since the last L3 read it: new
        memories, or a scene version written after that read. Several L3 tasks queued for one
        change (each L1 past the count, the L2 cascade) then cost one LLM call, not one each."""
        tenant = await asyncio.to_thread(self.layers.tenant_state, scope)
        if tenant.last_l3_at is None or tenant.memories_since_l3 > 0:
            return True
        newest = await asyncio.to_thread(self.layers.newest_scene_at, scope)
        return newest is not None and newest > tenant.last_l3_at

    async def _synthesise(self, run: Run, current: Profile | None) -> str:
        limit = self.settings.max_profile_chars
        if self.llm is None:
            types = (MemoryType.PERSONA, MemoryType.INSTRUCTION)
            memories = await asyncio.to_thread(
                self.store.list_memories, run.scope, Filters(types=types), 200
            )
            return offline.profile_body(memories, limit)
        scenes = await asyncio.to_thread(self.layers.current_scenes, run.scope)
        prompt = load_prompt("l3_profile")
        messages = l3_profile.profile_messages(prompt, scenes, current, self.settings)
        reply = await self._ask(run, l3_profile.STAGE, messages, ProfileDoc)
        return l3_profile.bounded(reply.profile, limit)

    # -- flush -------------------------------------------------------------------------------
    async def flush(self, tenant: str, session: str, task_id: str | None = None) -> FlushResult:
        """Run L1 until the session is caught up, then L2, then L3 when something changed."""
        base = task_id or f"flush-{uuid.uuid4().hex}"
        l1: list[StageResult] = []
        for i in range(MAX_FLUSH_BATCHES):
            result = await self.run_l1(Run(tenant, f"{base}.L1.{i}", session))
            l1.append(result)
            if result.skipped:
                break
        l2 = await self.run_l2(Run(tenant, f"{base}.L2", session))
        pending = await asyncio.to_thread(self.layers.tenant_state, Scope(tenant))
        l3 = None
        if l2.changed or pending.memories_since_l3 > 0:
            l3 = await self.run_l3(Run(tenant, f"{base}.L3"))
        return FlushResult(l1, l2, l3)

    # -- shared ------------------------------------------------------------------------------
    async def _replayed(self, run: Run) -> StageResult | None:
        receipt = await asyncio.to_thread(self.layers.receipt, run.scope, run.task_id)
        return None if receipt is None else StageResult.replay(receipt.result)

    async def _ask(self, run: Run, stage: str, messages: Any, schema: type[M]) -> M:
        """One validated LLM reply; every failure is recorded with its raw text, then raised."""
        if self.llm is None:
            raise ConfigError(f"stage {stage} needs an LLM endpoint")
        try:
            return await self.llm.complete_json(stage, messages, schema)
        except LLMOutputInvalid as exc:
            await self._record(run, stage, exc, exc.raws)
            raise StageOutputRejected(
                f"stage {stage} of task {run.task_id}: {exc}; raw reply begins"
                f" {exc.raw[:_RAW_EXCERPT]!r}",
                raws=exc.raws,
            ) from exc
        except LLMError as exc:
            raws = (exc.body,) if isinstance(exc, LLMHTTPError) else ()
            await self._record(run, stage, exc, raws)
            raise

    async def _record(
        self, run: Run, stage: str, exc: Exception, raws: tuple[str, ...]
    ) -> None:
        failure = Failure(run.task_id, run.tenant, run.session, stage,
                          f"{type(exc).__name__}: {exc}", raws, self.clock.now())  # fmt: skip
        await asyncio.to_thread(self.layers.record_failure, failure)


def _session_of(run: Run) -> str:
    if run.session is None:
        raise InvalidInput(f"task {run.task_id}: L1 runs on a session, none was given")
    return run.session
