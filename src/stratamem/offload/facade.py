"""`Offload`: the library face of context offload (one async class; the CLI and API call it)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.clock import Clock, IdFactory, SystemClock, UuidFactory
from stratamem.domain import Scope, check_ident
from stratamem.errors import InvalidIdentifier, InvalidInput
from stratamem.inputs import check_json
from stratamem.llm.base import LLM
from stratamem.offload import ingest as intake
from stratamem.offload import l1_summaries, l2_diagram, l15_judgment, unreferenced
from stratamem.offload.compaction import compact
from stratamem.offload.offline import NEEDS_LLM
from stratamem.offload.readback import ReadBack, read_slice
from stratamem.offload.results import Compaction, DiagramsView, IngestResult
from stratamem.offload.schedule import Scheduler, Stage, StageTask
from stratamem.offload.settings import OffloadSettings
from stratamem.offload.stage import StageDeps
from stratamem.store.core.port import Fence
from stratamem.store.evidence.receipts import Attempt
from stratamem.store.offload.port import OffloadStore
from stratamem.store.offload.records import Diagram, Entry, ToolPair

StageOutcome = l1_summaries.L1Outcome | l15_judgment.L15Outcome | l2_diagram.L2Outcome


class Offload:
    """Context offload over an offload store; `llm=None` runs the offline mode."""

    def __init__(
        self,
        store: OffloadStore,
        scheduler: Scheduler,
        *,
        llm: LLM | None = None,
        settings: OffloadSettings | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
    ) -> None:
        self.deps = StageDeps(
            store=store,
            llm=llm,
            scheduler=scheduler,
            settings=settings or OffloadSettings(),
            clock=clock or SystemClock(),
            ids=ids or UuidFactory(),
        )

    @property
    def offline(self) -> bool:
        return self.deps.llm is None

    # -- ingest ------------------------------------------------------------------------------
    async def ingest(
        self, tenant: str, session: str, pairs: Sequence[ToolPair | Mapping[str, Any]]
    ) -> IngestResult:
        """Append tool pairs (records or their JSON form); every pair is validated first."""
        now = self.deps.clock.now()
        records = [p if isinstance(p, ToolPair) else ToolPair.from_json(p, now) for p in pairs]
        return await intake.ingest_pairs(self.deps, tenant, session, records)

    async def user_message(
        self,
        tenant: str,
        session: str,
        text: str,
        *,
        message_id: str | None = None,
        timestamp: float | None = None,
    ) -> str:
        """Record a user message as a task boundary; returns its id."""
        return await intake.record_user_message(
            self.deps, tenant, session, text, message_id=message_id, timestamp=timestamp
        )

    async def resubmit(self, tenant: str, session: str) -> intake.Resubmitted:
        """Submit the session's waiting work again (pending pairs, unjudged boundaries,
        unmapped entries), e.g. after its tasks were dead-lettered and purged."""
        return await intake.resubmit(self.deps, tenant, session)

    # -- stages ------------------------------------------------------------------------------
    # `attempt`: the pipeline execution running the stage; its receipt is written with the
    # stage's commit (offload-l2: alone, last, under the fence).
    async def run_l1(
        self, tenant: str, session: str, attempt: Attempt | None = None
    ) -> l1_summaries.L1Outcome:
        session = check_ident(session, "session")
        return await l1_summaries.run_l1(self.deps, tenant, session, attempt)

    async def run_l15(
        self, tenant: str, session: str, mark_id: str, attempt: Attempt | None = None
    ) -> l15_judgment.L15Outcome:
        check_ident(mark_id, "message id")
        session = check_ident(session, "session")
        return await l15_judgment.run_l15(self.deps, tenant, session, mark_id, attempt)

    async def run_l2(
        self,
        tenant: str,
        session: str,
        fence: Fence | None = None,
        attempt: Attempt | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> l2_diagram.L2Outcome:
        """offload-l2 for the session; `payload` may narrow it to one diagram's retry or to
        the orphan fallback (`l2_diagram.L2Scope`)."""
        session = check_ident(session, "session")
        narrowed = l2_diagram.L2Scope.of(payload or {})
        return await l2_diagram.run_l2(self.deps, tenant, session, fence, attempt, narrowed)

    async def run_stage(self, task: StageTask, fence: Fence | None = None) -> StageOutcome:
        """Run one stage task (what the pipeline's executors and the in-process runner call)."""
        if task.stage is Stage.L1:
            return await self.run_l1(task.tenant, task.session)
        if task.stage is Stage.L15:
            return await self.run_l15(task.tenant, task.session, mark_of(task.payload))
        return await self.run_l2(task.tenant, task.session, fence, None, task.payload)

    # -- reading -----------------------------------------------------------------------------
    async def compact(
        self,
        tenant: str,
        session: str,
        messages: Sequence[Mapping[str, Any]],
        budget_tokens: int,
    ) -> Compaction:
        """`messages` (OpenAI chat format) compacted for `budget_tokens` (see `compaction`).

        A tool result to be dropped whose entry does not exist yet (its summary failed or has
        not run) first gets an offline entry and its ref, here and now, so nothing leaves the
        context without a ref (a result whose call id is not a valid identifier cannot have
        one, and stays)."""
        check_ident(session, "session")
        check_json(list(messages), "messages")
        call_ids = _known_call_ids(messages)

        def load() -> tuple[list[Entry], list[Diagram]]:
            scope = Scope(tenant)
            return (
                self.deps.store.list_entries(scope, session, call_ids),
                self.deps.store.list_diagrams(scope, session),
            )

        entries, diagrams = await asyncio.to_thread(load)
        by_call = {e.call_id: e for e in entries}
        result = compact(messages, budget_tokens, by_call, diagrams, self.deps.settings)
        missing = [c for c in result.unreferenced if c in call_ids]
        if not missing:
            return result
        made = await unreferenced.offline_entries(self.deps, tenant, session, messages, missing)
        by_call.update({e.call_id: e for e in made})
        return compact(messages, budget_tokens, by_call, diagrams, self.deps.settings)

    async def read_back(
        self, tenant: str, ref_id: str, *, query: str | None = None, max_tokens: int | None = None
    ) -> ReadBack:
        """The original result behind `ref_id`, or the slice around `query`, within the cap."""
        check_ident(ref_id, "ref id")
        cap = max_tokens or self.deps.settings.readback_max_tokens
        if cap < 1:
            raise InvalidInput("max_tokens must be at least 1")
        ref = await asyncio.to_thread(self.deps.store.get_ref, Scope(tenant), ref_id)
        return read_slice(ref, cap, query)

    async def entries(self, tenant: str, session: str) -> list[Entry]:
        check_ident(session, "session")
        return await asyncio.to_thread(self.deps.store.list_entries, Scope(tenant), session)

    async def diagrams(self, tenant: str, session: str) -> DiagramsView:
        """The session's tasks and diagrams; offline, with a note that diagrams need an LLM."""
        check_ident(session, "session")
        found = await asyncio.to_thread(self.deps.store.list_diagrams, Scope(tenant), session)
        return DiagramsView(found, NEEDS_LLM if self.offline else None)


def mark_of(payload: Mapping[str, Any]) -> str:
    """The boundary id an offload-l15 task carries."""
    mark = payload.get("mark")
    if not isinstance(mark, str):
        raise InvalidInput("an offload-l15 task needs the boundary id in payload.mark")
    return mark


def _known_call_ids(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Tool call ids of the tool messages, those that are valid identifiers only (others
    cannot have an entry and are left as they are)."""
    ids: list[str] = []
    for message in messages:
        call_id = message.get("tool_call_id")
        if message.get("role") != "tool" or not isinstance(call_id, str):
            continue
        try:
            ids.append(check_ident(call_id, "call id"))
        except InvalidIdentifier:
            continue
    return ids
