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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
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
    NotFound,
    Postponed,
    ReceiptConflict,
    StageOutputRejected,
)
from stratamem.layers import (
    forgetting,
    l1_read,
    l1_reconcile,
    l2_scenes,
    l3_profile,
    ledger,
    offline,
    scheduling,
)
from stratamem.layers.l1_read import L1Read, ReadRun
from stratamem.layers.model import FlushResult, NewMemory, Reconciled, StageResult
from stratamem.layers.schemas import ProfileDoc, Reconciliation, SceneOps, Shown, check_profile
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLM, LLMOutputInvalid
from stratamem.llm.prompts import load_prompt
from stratamem.stages.checked import Answer, ask_checked
from stratamem.stages.records import Origin, reason, recordable
from stratamem.store.core.port import Fence, Filters, Store
from stratamem.store.evidence.port import EvidenceStore
from stratamem.store.evidence.receipts import Attempt, Receipt
from stratamem.store.failures.records import Failure, FailureKind, FailureStatus
from stratamem.store.layers.ledger import Outcome, TurnOutcome
from stratamem.store.layers.port import (
    Extraction,
    L1Commit,
    L2Commit,
    L3Commit,
    LayerStore,
    RereadCommit,
    RetryCommit,
    SessionState,
)
from stratamem.store.lineage.rows import MEMORY, PROFILE, PROFILE_ID, SCENE, Ref

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")
#: The most L1 batches one flush runs before it stops (its L2 and L3 still run).
MAX_FLUSH_BATCHES = 1000
#: How many successors a stale scene's memory is followed through to its current version.
MAX_SUCCESSORS = 50
#: The most turns one call of `reread` reads again.
MAX_REREAD_TURNS = 2000
_RAW_EXCERPT = 300


@dataclass(frozen=True, slots=True)
class Run:
    """Who is running a stage: the task id (receipts, stable ids) and its fencing token."""

    tenant: str
    task_id: str
    session: str | None = None
    fence: Fence | None = None
    attempt: Attempt | None = None
    """The pipeline execution running the stage (written into its receipts)."""
    retried: bool = True
    """Whether a failure of this run is retried (a pipeline task); a flush's stages are not:
    an L2 or L3 reply that stays unusable there falls back to the offline builder at once."""

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant)

    def origin(self, now: float) -> Origin:
        return Origin(self.tenant, self.session, self.task_id, now)


#: A flush stage's body over its run: L1's batches, or L2's or L3's one result.
StageBody = Callable[[Run], Awaitable[list[StageResult]]]
#: How a flush runs a stage ("L1", "L2", "L3") of a session (None: L3's tenant): builds the
#: stage's `Run` (task id, fence, attempt) and runs the body under what the stage must hold.
StageTurn = Callable[[str, str | None, StageBody], Awaitable[list[StageResult]]]


class LayerService:
    """The memory layers over one store (its turns and memories, the layers' records, and the
    receipts each stage replays when it finds its own); `llm=None` runs the offline mode."""

    def __init__(
        self,
        store: Store,
        layers: LayerStore,
        evidence: EvidenceStore,
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
        self.evidence = evidence
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
        """Extract and reconcile the next batch of a session's turns; move its cursor past the
        turns the run settled (covered by an accepted extraction, or quarantined)."""
        session = _session_of(run)
        receipt, state, batch, background = await asyncio.to_thread(self._l1_start, run, session)
        done = _replay(run, receipt)
        if done is not None:
            return done
        if not batch:
            return StageResult("L1", self.mode, skipped=True)
        read = await self._read(run, batch, background)
        if read.interrupted is None:
            return await self._commit_l1(run, run.task_id, state.cursor_seq, read)
        if read.settled:  # keep what settled before the endpoint failed (its own receipt)
            await self._commit_l1(run, f"{run.task_id}@{state.cursor_seq}", state.cursor_seq,
                                  read)  # fmt: skip
        await self._record(run, l1_read.STAGE, read.interrupted)
        raise read.interrupted

    async def _commit_l1(self, run: Run, task_id: str, cursor: int, read: L1Read) -> StageResult:
        """Reconcile what a run read and commit it with the quarantined turns, the notes and
        the new cursor (the last settled turn) and the receipt of `task_id`."""
        session = _session_of(run)
        proposed = l1_reconcile.unique(read.memories)
        plan, notes = await self._reconcile(run, proposed, f"{session}:{cursor}")
        now = self.clock.now()
        outcomes = ledger.l1_outcomes(read.settled, read.memories, proposed, plan.made,
                                      [*read.quarantined, *read.notes], task_id, now)  # fmt: skip
        counts = {**read.counts, **plan.counts, **ledger.counted(outcomes)}
        result = StageResult("L1", self.mode, changed=bool(plan.memories), counts=counts)
        extraction = Extraction(plan.memories, plan.supersedes, self._scheduled(read.quarantined),
                                [*read.notes, *notes], outcomes)  # fmt: skip
        commit = L1Commit(session, task_id, cursor, read.settled[-1].seq, now, extraction,
                          result.to_json(), run.attempt)  # fmt: skip
        await asyncio.to_thread(self.layers.commit_l1, run.scope, commit, run.fence)
        await self._embed_new(run.scope, len(plan.memories))
        return result

    def _l1_start(
        self, run: Run, session: str
    ) -> tuple[Receipt | None, SessionState, list[Turn], list[Turn]]:
        """What an L1 reads before its LLM call, in one trip to a thread (they were four, each
        a thread hop of the event loop: bench/drain.py): the task's receipt, the session's
        state, the batch past its cursor and the turns shown before it."""
        receipt = self.evidence.receipt(run.scope, run.task_id)
        state = self.layers.session_state(run.scope, session)
        batch = self.store.list_turns(run.scope, session, state.cursor_seq,
                                      self.settings.max_batch_turns)  # fmt: skip
        background = self._background_now(run.scope, session, state.cursor_seq) if batch else []
        return receipt, state, batch, background

    async def _background(self, scope: Scope, session: str, cursor: int) -> list[Turn]:
        return await asyncio.to_thread(self._background_now, scope, session, cursor)

    def _background_now(self, scope: Scope, session: str, cursor: int) -> list[Turn]:
        shown = self.settings.context_turns
        if shown == 0 or cursor == 0:
            return []
        start = max(0, cursor - shown)
        return self.store.list_turns(scope, session, start, cursor - start)

    async def _read(self, run: Run, batch: Sequence[Turn], background: Sequence[Turn]) -> L1Read:
        """The batch read by the LLM (bisecting, quarantining; `interrupted` by a transport
        failure) or by the offline extractor."""
        if self.llm is None:
            memories = offline.extract(batch, self.settings.max_memories_per_batch)
            counts = {"turns": len(batch), "covered": len(batch), "left": 0}
            return L1Read(memories, list(batch), counts=counts)
        reader = ReadRun(self.llm, run.origin(self.clock.now()), self.settings)
        return await l1_read.read_batch(reader, batch, background)

    async def _reconcile(
        self, run: Run, proposed: Sequence[NewMemory], id_seed: str
    ) -> tuple[l1_reconcile.L1Plan, list[Failure]]:
        neighbours = await l1_reconcile.find_neighbours(
            self.store, self.embedder, run.scope, proposed, self.settings.neighbours,
            self._candidates, self.settings.reconcile_min_similarity,
        )  # fmt: skip
        decisions, notes = await self._decide(run, proposed, neighbours)
        existing = {m.id: m for group in neighbours for m in group}
        made_by = "offline@v1" if self.llm is None else load_prompt("l1_extract").tag
        near = {i for i, group in enumerate(neighbours) if group}
        restated = {i for i in near if l1_reconcile.restates(proposed[i], neighbours[i])}
        plan = l1_reconcile.plan(run.scope, _session_of(run), proposed, decisions, existing,
                                 id_seed, self.clock.now(), self.mode, made_by, near,
                                 restated)  # fmt: skip
        return plan, notes

    async def _decide(
        self,
        run: Run,
        proposed: Sequence[NewMemory],
        neighbours: Sequence[Sequence[MemoryRecord]],
    ) -> tuple[list[Reconciled], list[Failure]]:
        """The model's decisions; when its reply is unusable (after the repair round), the
        offline rule decides (store, or skip an exact repeat) and a `fallback` is noted. The
        model sees only the new memories that have a neighbour and repeat none: the offline
        rule decides the others."""
        offline = l1_reconcile.offline_decisions(proposed, neighbours)
        asked = l1_reconcile.to_ask(proposed, neighbours)
        if self.llm is None or not asked:
            return offline, []
        shown, near = [proposed[i] for i in asked], [neighbours[i] for i in asked]
        stage, origin = l1_reconcile.STAGE, run.origin(self.clock.now())
        messages, view = l1_reconcile.reconcile_messages(load_prompt("l1_reconcile"), shown,
                                                         near)  # fmt: skip
        min_words = self.settings.min_memory_words
        try:
            answer = await self._call(run, stage, messages, Reconciliation,
                                      lambda r: l1_reconcile.read_reply(r, view, min_words))
        except LLMOutputInvalid as exc:
            fallback = origin.failed(stage, exc, FailureKind.FALLBACK)
            return offline, [fallback]
        decided = l1_reconcile.decisions_from(answer.value.kept, view, len(shown))
        by_index = {asked[d.index]: replace(d, index=asked[d.index]) for d in decided}
        decisions = [by_index.get(i, offline[i]) for i in range(len(proposed))]
        return decisions, origin.dropped(stage, answer.value.dropped)

    async def _embed_new(self, scope: Scope, count: int) -> None:
        """Embed the tenant's new memories now, so its next reconciliation finds them by vector
        too (every tenant's pending memories were shared out instead: with many tenants owing
        vectors, the new memory was seldom among the `count` embedded, and finding which
        tenants owed any scanned the whole table on every L1)."""
        if self.embedder is None or count == 0:
            return
        try:
            await backfill.embed_pending(
                self.store, self.embedder, self._embed_batch, count, tenant=scope.tenant
            )
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
        stale = await asyncio.to_thread(self.layers.stale, run.scope)
        stale_ids = {ref.id for ref in stale if ref.kind == SCENE}
        if mark == tenant.l2_mark and not stale_ids:
            return StageResult("L2", self.mode, skipped=True)
        scenes = await asyncio.to_thread(self.layers.current_scenes, run.scope)
        # built on a corrected or forgotten memory: written again first, then consolidated
        refreshed = [await self._refreshed(run.scope, s) for s in scenes if s.id in stale_ids]
        by_id = {s.id: s for s in refreshed}
        scenes = [by_id.get(s.id, s) for s in scenes if not by_id.get(s.id, s).deleted]
        versions, notes = await self._consolidate(run, scenes, changed) if changed else ([], [])
        versions = [*refreshed, *versions]
        counts = {"memories": len(changed), "scene_versions": len(versions)}
        if any(n.kind is FailureKind.FALLBACK for n in notes):
            counts["offline_fallback"] = 1
        result = StageResult("L2", self.mode, changed=bool(versions), counts=counts)
        commit = L2Commit(run.task_id, run.session, tenant.l2_mark, mark, self.clock.now(),
                          versions, result.to_json(), notes, run.attempt)  # fmt: skip
        await asyncio.to_thread(self.layers.commit_l2, run.scope, commit, run.fence)
        return result

    async def l2_worth_running(self, scope: Scope) -> bool:
        """Whether what changed since the tenant's last L2 is worth a run now
        (`scheduling.l2_worth_running`)."""
        tenant = await asyncio.to_thread(self.layers.tenant_state, scope)
        changed, _ = await asyncio.to_thread(
            self.layers.changed_memories, scope, tenant.l2_mark, self.settings.l2_max_memories
        )
        stale = await asyncio.to_thread(self.layers.stale, scope)
        last_turn_at = await asyncio.to_thread(self.layers.last_turn_at, scope)
        inputs = scheduling.L2Inputs.of(changed, any(ref.kind == SCENE for ref in stale),
                                        last_turn_at)  # fmt: skip
        return scheduling.l2_worth_running(inputs, self.clock.now(), self.settings)

    async def l3_worth_running(self, scope: Scope) -> bool:
        """Whether writing the tenant's profile now is worth a call
        (`scheduling.l3_worth_running`; a stale profile always is)."""
        if Ref(PROFILE, PROFILE_ID) in await asyncio.to_thread(self.layers.stale, scope):
            return True
        tenant = await asyncio.to_thread(self.layers.tenant_state, scope)
        newest = await asyncio.to_thread(self.layers.newest_scene_at, scope)
        return scheduling.l3_worth_running(tenant, newest, self.clock.now(), self.settings)

    async def _refreshed(self, scope: Scope, scene: Scene) -> Scene:
        """`scene` written again (extractively) from the current versions of its memories:
        a corrected memory by its correction, a forgotten one left out."""
        heads = await asyncio.to_thread(_current_versions, self.store, scope, scene.memory_ids)
        return forgetting.extractive_scene(scene, heads, scene.title, scene.version + 1,
                                           self.clock.now(), self.settings.max_scene_chars)

    async def _consolidate(
        self, run: Run, scenes: Sequence[Scene], changed: Sequence[MemoryRecord]
    ) -> tuple[list[Scene], list[Failure]]:
        ctx = l2_scenes.SceneContext(run.scope, self.clock.now(), self.mode, run.task_id,
                                     self.settings)  # fmt: skip
        if self.llm is None:
            return l2_scenes.offline_scenes(scenes, changed, ctx), []
        prompt = load_prompt("l2_scenes")
        messages, view = l2_scenes.scene_messages(prompt, scenes, changed, self.settings)
        try:
            answer = await self._ask(run, l2_scenes.STAGE, messages, SceneOps,
                                     lambda r: l2_scenes.read_reply(r, view, self.settings),
                                     fallback=True)  # fmt: skip
        except _FallBack as fell:
            offline_ctx = replace(ctx, mode=Mode.OFFLINE)
            return l2_scenes.offline_scenes(scenes, changed, offline_ctx), [fell.record]
        notes = run.origin(ctx.now).dropped(l2_scenes.STAGE, answer.value.dropped)
        return l2_scenes.apply_ops(answer.value.kept, view, scenes, ctx), notes

    # -- L3 ----------------------------------------------------------------------------------
    async def run_l3(self, run: Run) -> StageResult:
        """Write the tenant's profile anew from its scenes (a new version only if it changed).

        With an LLM the profile is written from the scenes only: without scenes there is
        nothing to write it from, and the run is skipped (recorded, so the count of memories
        since the last L3 does not ask for it again)."""
        done = await self._replayed(run)
        if done is not None:
            return done
        if not await self._l3_has_news(run.scope):
            return StageResult("L3", self.mode, skipped=True)
        read_at = self.clock.now()
        current = await asyncio.to_thread(self.layers.profile, run.scope)
        scenes = await asyncio.to_thread(self.layers.current_scenes, run.scope)
        if self.llm is not None and not scenes:
            skipped = StageResult("L3", self.mode, skipped=True, counts={"scenes": 0})
            return await self._commit_l3(run, None, skipped, read_at)
        body, sources, mode = await self._synthesise(run, current, scenes)
        changed = bool(body) and (current is None or body != current.body)
        profile = None
        if changed:
            version = 1 if current is None else current.version + 1
            profile = Profile(run.tenant, body, version, self.clock.now(), mode)
        counts = {"chars": len(body), "scenes": len(scenes)}
        if mode is not self.mode:
            counts["offline_fallback"] = 1
        result = StageResult("L3", self.mode, changed=changed, counts=counts)
        return await self._commit_l3(run, profile, result, read_at, sources)

    async def _commit_l3(
        self,
        run: Run,
        profile: Profile | None,
        result: StageResult,
        read_at: float,
        sources: Sequence[Ref] = (),
    ) -> StageResult:
        commit = L3Commit(run.task_id, self.clock.now(), profile, result.to_json(), read_at,
                          run.attempt, sources)  # fmt: skip
        await asyncio.to_thread(self.layers.commit_l3, run.scope, commit, run.fence)
        return result

    async def _l3_has_news(self, scope: Scope) -> bool:
        """Whether anything the profile is written from changed since the last L3 read it: new
        memories, or a scene version written after that read. Several L3 tasks queued for one
        change (each L1 past the count, the L2 cascade) then cost one LLM call, not one each."""
        tenant = await asyncio.to_thread(self.layers.tenant_state, scope)
        if tenant.last_l3_at is None or tenant.memories_since_l3 > 0:
            return True
        if Ref(PROFILE, PROFILE_ID) in await asyncio.to_thread(self.layers.stale, scope):
            return True
        newest = await asyncio.to_thread(self.layers.newest_scene_at, scope)
        return newest is not None and newest > tenant.last_l3_at

    async def _synthesise(
        self, run: Run, current: Profile | None, scenes: list[Scene]
    ) -> tuple[str, list[Ref], Mode]:
        """The profile's body, what it was written from (its lineage) and how: the memories
        read offline; with an LLM, the scene versions shown and their memories (offline, from
        the scenes' memories, when the model's reply stays unusable on the last try)."""
        limit = self.settings.max_profile_chars
        if self.llm is None:
            types = (MemoryType.PERSONA, MemoryType.INSTRUCTION)
            memories = await asyncio.to_thread(
                self.store.list_memories, run.scope, Filters(types=types), 200
            )
            body = offline.profile_body(memories, limit)
            return body, [Ref(MEMORY, m.id) for m in memories], Mode.OFFLINE
        prompt = load_prompt("l3_profile")
        messages = l3_profile.profile_messages(prompt, scenes, current, self.settings)
        shown = Shown(min_words=self.settings.min_memory_words)
        try:
            answer = await self._ask(run, l3_profile.STAGE, messages, ProfileDoc,
                                     lambda reply: check_profile(reply, shown), fallback=True)
        except _FallBack as fell:
            await asyncio.to_thread(self.layers.record_failures, [fell.record])
            memories = [m for s in scenes for m in
                        await asyncio.to_thread(_current_versions, self.store, run.scope,
                                                s.memory_ids)]  # fmt: skip
            kept = [m for m in memories if m.type in (MemoryType.PERSONA, MemoryType.INSTRUCTION)]
            body = offline.profile_body(kept or memories, limit)
            return body, [Ref(MEMORY, m.id) for m in (kept or memories)], Mode.OFFLINE
        sources = [Ref(SCENE, s.id, s.version) for s in scenes]
        sources += [Ref(MEMORY, m) for s in scenes for m in s.memory_ids]
        if current is not None:  # shown too: what it says may be said again
            sources.append(Ref(PROFILE, PROFILE_ID, current.version))
        return l3_profile.bounded(answer.value, limit), sources, Mode.LLM

    # -- flush -------------------------------------------------------------------------------
    async def flush(
        self, tenant: str, session: str, task_id: str | None = None, turn: StageTurn | None = None
    ) -> FlushResult:
        """Run L1 until the session is caught up, then L2, then L3 when something changed: the
        one flush loop. Each stage runs as `turn` runs it (as it is, by default; under the
        stage's lock and execution record for a flush that takes its turn with the pipeline's
        tasks, `layers.executors.flush_in_turn`), its task id `<base>.<stage>`."""
        base = task_id or f"flush-{uuid.uuid4().hex}"

        async def plain(stage: str, of_session: str | None, body: StageBody) -> list[StageResult]:
            return await body(Run(tenant, f"{base}.{stage}", of_session, retried=False))

        run_stage = turn or plain
        l1 = await run_stage("L1", session, self.l1_until_caught_up)
        [l2] = await run_stage("L2", session, _one(self.run_l2))
        pending = await asyncio.to_thread(self.layers.tenant_state, Scope(tenant))
        l3 = None
        if l2.changed or pending.memories_since_l3 > 0:
            [l3] = await run_stage("L3", None, _one(self.run_l3))
        return FlushResult(l1, l2, l3)

    async def l1_until_caught_up(self, run: Run) -> list[StageResult]:
        """L1 batches until one finds nothing left (at most `MAX_FLUSH_BATCHES`), batch `i`
        under the task id `<run.task_id>.<i>` (its receipt)."""
        results: list[StageResult] = []
        for i in range(MAX_FLUSH_BATCHES):
            result = await self.run_l1(replace(run, task_id=f"{run.task_id}.{i}"))
            results.append(result)
            if result.skipped:
                break
        return results

    # -- retrying a quarantined turn --------------------------------------------------------
    async def retry_quarantine(self, run: Run, failure: Failure) -> StageResult:
        """Extract a quarantined turn again. An accepted reply commits its memories and resolves
        the quarantine in one transaction; an unusable one keeps it open with the new raw
        replies (`StageOutputRejected`); a transport failure changes nothing."""
        if failure.kind is not FailureKind.QUARANTINE or failure.session is None:
            raise InvalidInput(f"failure {failure.id!r} is not a quarantined turn")
        if self.llm is None:
            raise ConfigError("retrying a quarantined turn needs an LLM endpoint")
        turns = await asyncio.to_thread(self.store.get_turns, run.scope, failure.turn_ids)
        if not turns:
            raise NotFound(f"the turn of failure {failure.id!r} is no longer stored")
        background = await self._background(run.scope, failure.session, turns[0].seq - 1)
        reader = ReadRun(self.llm, run.origin(self.clock.now()), self.settings)
        try:
            extracted = await l1_read.extract(reader, turns, background)
        except LLMOutputInvalid as exc:
            await asyncio.to_thread(self.layers.note_retry, run.scope, failure.id,
                                    self.clock.now(), error=reason(exc), raws=exc.raws)
            raise StageOutputRejected(f"failure {failure.id!r}: {exc}", raws=exc.raws) from exc
        proposed = l1_reconcile.unique(extracted.memories)
        plan, notes = await self._reconcile(run, proposed, run.task_id)
        records = extracted.records(reader.origin, failure.turn_ids)
        now = self.clock.now()
        outcomes = ledger.l1_outcomes(turns, extracted.memories, proposed, plan.made, records,
                                      run.task_id, now)  # fmt: skip
        counts = {"turns": 1, "covered": 1, **plan.counts, **ledger.counted(outcomes)}
        result = StageResult("L1", self.mode, changed=bool(plan.memories), counts=counts)
        extraction = Extraction(plan.memories, plan.supersedes, notes=[*notes, *records],
                                outcomes=outcomes)  # fmt: skip
        commit = RetryCommit(failure.id, run.task_id, now, extraction, result.to_json(),
                             run.attempt)  # fmt: skip
        await asyncio.to_thread(self.layers.commit_retry, run.scope, commit, run.fence)
        await self._embed_new(run.scope, len(plan.memories))
        return result

    def _scheduled(self, quarantined: Sequence[Failure]) -> list[Failure]:
        """New quarantines with their first automatic retry scheduled."""
        return [replace(q, retry_at=self.settings.quarantine_retry_at(q.failed_at, 0))
                for q in quarantined]  # fmt: skip

    async def auto_retry(self, run: Run, failure_id: str) -> StageResult:
        """The automatic retry of a quarantined turn whose `retry_at` has come (a pipeline L1
        task with `{"retry": id}`, submitted by the backlog scheduler). Accepted: its memories
        are written and the record resolved. Unusable (or refused by the endpoint): the retry is
        counted and the next one scheduled after the following wait of `quarantine_retry_s`;
        after the last the record waits for an operator. Endpoint trouble is raised (the
        pipeline postpones the task; the retry is not counted). Skipped when the record is no
        longer open, not due, or this task committed it already."""
        done = await self._replayed(run)
        if done is not None:
            return done
        failure = await asyncio.to_thread(self.layers.get_failure, run.scope, failure_id)
        now = self.clock.now()
        due = failure.retry_at is not None and failure.retry_at <= now
        if failure.status is not FailureStatus.OPEN or not due or self.llm is None:
            return StageResult("L1", self.mode, skipped=True)
        try:
            return await self.retry_quarantine(run, failure)
        except Postponed:
            raise
        except (StageOutputRejected, LLMError) as exc:
            retries = failure.auto_retries + 1
            retry_at = self.settings.quarantine_retry_at(self.clock.now(), retries)
            await asyncio.to_thread(self.layers.schedule_retry, run.scope, failure_id,
                                    retry_at, retries)  # fmt: skip
            log.info("automatic retry %d of %s failed (%s); next: %s", retries, failure_id,
                     type(exc).__name__, "operator" if retry_at is None else retry_at)
            return StageResult("L1", self.mode, counts={"retried": 1, "resolved": 0})

    # -- reading turns again (the turn ledger's "nothing to remember") -----------------------
    async def reread(
        self,
        tenant: str,
        session: str | None = None,
        *,
        outcome: Outcome = Outcome.NOTHING,
        limit: int = MAX_REREAD_TURNS,
        task_id: str | None = None,
    ) -> list[StageResult]:
        """Extract again the turns of a session (or of the tenant, `session=None`) whose outcome
        is `outcome`, e.g. after the model was changed: per session in batches, each committed
        with the turns' new outcomes (memories, quarantines, refusals as a first run would).
        Without an LLM the offline extractor reads them again."""
        found = await asyncio.to_thread(self.layers.turns_with_outcome, Scope(tenant), session,
                                        outcome, limit)  # fmt: skip
        base = task_id or f"reread-{uuid.uuid4().hex}"
        by_session: dict[str, list[TurnOutcome]] = {}
        for entry in found:
            by_session.setdefault(entry.session, []).append(entry)
        results = []
        size = self.settings.max_batch_turns
        for name, entries in by_session.items():
            for i in range(0, len(entries), size):
                run = Run(tenant, f"{base}.{name}.{i // size}", name)
                results.append(await self._reread(run, entries[i : i + size], outcome))
        return results

    async def _reread(
        self, run: Run, entries: Sequence[TurnOutcome], expected: Outcome
    ) -> StageResult:
        session = _session_of(run)
        found = await asyncio.to_thread(self.store.get_turns, run.scope,
                                        [e.turn_id for e in entries])  # fmt: skip
        turns = sorted(found, key=lambda t: t.seq)
        if not turns:
            return StageResult("L1", self.mode, skipped=True)
        background = await self._background(run.scope, session, turns[0].seq - 1)
        read = await self._read(run, turns, background)
        if read.interrupted is not None:
            await self._record(run, l1_read.STAGE, read.interrupted)
            raise read.interrupted
        proposed = l1_reconcile.unique(read.memories)
        plan, notes = await self._reconcile(run, proposed, run.task_id)
        now = self.clock.now()
        outcomes = ledger.l1_outcomes(read.settled, read.memories, proposed, plan.made,
                                      [*read.quarantined, *read.notes], run.task_id, now)
        counts = {**read.counts, **plan.counts, **ledger.counted(outcomes)}
        result = StageResult("L1", self.mode, changed=bool(plan.memories), counts=counts)
        extraction = Extraction(plan.memories, plan.supersedes, self._scheduled(read.quarantined),
                                [*read.notes, *notes], outcomes)  # fmt: skip
        commit = RereadCommit(session, run.task_id, now, expected, extraction, result.to_json(),
                              run.attempt)  # fmt: skip
        await asyncio.to_thread(self.layers.commit_reread, run.scope, commit, run.fence)
        await self._embed_new(run.scope, len(plan.memories))
        return result

    # -- shared ------------------------------------------------------------------------------
    async def _replayed(self, run: Run) -> StageResult | None:
        """The result of this task's authentic receipt (an earlier attempt committed it);
        `ReceiptConflict` for a receipt that does not verify: it is not taken as done."""
        return _replay(run, await asyncio.to_thread(self.evidence.receipt, run.scope, run.task_id))

    async def _call(
        self, run: Run, stage: str, messages: Any, schema: type[M], read: Callable[[M], R]
    ) -> Answer[R]:
        """One checked LLM reply (`stages.checked`); a transport failure is recorded (a `stage`
        failure, with the error body) and raised; an unusable reply is raised to the caller."""
        if self.llm is None:
            raise ConfigError(f"stage {stage} needs an LLM endpoint")
        try:
            return await ask_checked(self.llm, stage, messages, schema, read)
        except LLMOutputInvalid:
            raise
        except LLMError as exc:
            await self._record(run, stage, exc)
            raise

    async def _ask(
        self,
        run: Run,
        stage: str,
        messages: Any,
        schema: type[M],
        read: Callable[[M], R],
        *,
        fallback: bool = False,
    ) -> Answer[R]:
        """As `_call`, and an unusable reply fails the stage too: recorded with its raw replies,
        raised as `StageOutputRejected` (the pipeline retries the task). With `fallback`, a
        reply still unusable after its repair round on the last try (`_last_try`) raises
        `_FallBack` with a `fallback` record instead: the stage builds offline."""
        try:
            return await self._call(run, stage, messages, schema, read)
        except LLMOutputInvalid as exc:
            if fallback and self._last_try(run):
                detail = {"offline": True, "attempt": _attempt_of(run) + 1}
                record = run.origin(self.clock.now()).failed(stage, exc, FailureKind.FALLBACK,
                                                             detail)  # fmt: skip
                log.warning("stage %s of %s: unusable after its repair round, built offline: %s",
                            stage, run.tenant, exc)  # fmt: skip
                raise _FallBack(record) from exc
            await self._record(run, stage, exc)
            raise StageOutputRejected(
                f"stage {stage} of task {run.task_id}: {exc}; raw reply begins"
                f" {exc.raw[:_RAW_EXCERPT]!r}",
                raws=exc.raws,
            ) from exc

    def _last_try(self, run: Run) -> bool:
        """Whether no retry follows a failure of `run`: not retried at all (a flush's stage),
        or its task's attempt `offline_after_attempts` (counted from 1)."""
        return not run.retried or _attempt_of(run) + 1 >= self.settings.offline_after_attempts

    async def _record(self, run: Run, stage: str, exc: LLMError) -> None:
        if not recordable(exc):
            return
        failure = run.origin(self.clock.now()).failed(stage, exc)
        await asyncio.to_thread(self.layers.record_failures, [failure])


def _one(stage: Callable[[Run], Awaitable[StageResult]]) -> StageBody:
    async def body(run: Run) -> list[StageResult]:
        return [await stage(run)]

    return body


def _current_versions(
    store: Store, scope: Scope, memory_ids: Sequence[str]
) -> list[MemoryRecord]:
    """The current version of each memory (following `superseded_by`), once each, in order;
    memories no longer valid, or gone, are left out."""
    found: dict[str, MemoryRecord] = {}
    for memory_id in memory_ids:
        current: str | None = memory_id
        for _ in range(MAX_SUCCESSORS):
            try:
                memory = store.get_memory(scope, current or "")
            except NotFound:
                break
            if memory.superseded_by is None:
                if memory.is_current:
                    found.setdefault(memory.id, memory)
                break
            current = memory.superseded_by
    return list(found.values())


class _FallBack(Exception):
    """An L2 / L3 reply unusable on the last try: the stage builds offline (`record` says so)."""

    def __init__(self, record: Failure) -> None:
        super().__init__(record.error)
        self.record = record


def _attempt_of(run: Run) -> int:
    return 0 if run.attempt is None else run.attempt.attempt


def _replay(run: Run, receipt: Receipt | None) -> StageResult | None:
    """The result an authentic receipt of `run`'s task records (an earlier attempt committed
    it), None without one; `ReceiptConflict` for a receipt that does not verify: it is not
    taken as done."""
    if receipt is None:
        return None
    if not receipt.authentic:
        raise ReceiptConflict(
            f"task {run.task_id}: its receipt does not verify (tampered, or signed with a"
            " retired key); nothing is taken as done"
        )
    return StageResult.replay(receipt.result)


def _session_of(run: Run) -> str:
    if run.session is None:
        raise InvalidInput(f"task {run.task_id}: L1 runs on a session, none was given")
    return run.session
