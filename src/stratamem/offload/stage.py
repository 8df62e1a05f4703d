"""What every offload stage receives, and the diagram timer they share."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from dataclasses import dataclass

from stratamem.clock import Clock, IdFactory
from stratamem.domain import Scope
from stratamem.llm.base import LLM
from stratamem.offload.schedule import Scheduler, Stage, StageTask, l2_timer_key
from stratamem.offload.settings import OffloadSettings
from stratamem.store.offload.port import OffloadStore


@dataclass(frozen=True, slots=True)
class StageDeps:
    """The ports of the offload stages; `llm` None means offline mode."""

    store: OffloadStore
    llm: LLM | None
    scheduler: Scheduler
    settings: OffloadSettings
    clock: Clock
    ids: IdFactory


def ref_id_for(session: str, call_id: str) -> str:
    """A ref id derived from session and call id: stable across re-runs, and an opaque token
    (never the caller's text), so it is safe in keys, URLs and logs."""
    digest = hashlib.blake2b(f"{session}\x00{call_id}".encode(), digest_size=12).hexdigest()
    return f"ref-{digest}"


def derived_id(prefix: str, *parts: str) -> str:
    digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).hexdigest()
    return f"{prefix}-{digest}"


async def arm_diagram_timer(deps: StageDeps, tenant: str, session: str) -> int:
    """Arm offload-l2 for entries routed to a task with no node yet: at once when one task has
    a batch of them, else after the delay. Offline (no LLM) nothing is armed. Returns the
    unmapped count."""
    if deps.llm is None:
        return 0
    unmapped = await asyncio.to_thread(deps.store.unmapped_entries, Scope(tenant), session)
    if not unmapped:
        return 0
    now = deps.clock.now()
    per_task = Counter(e.task_id for e in unmapped)
    soon = max(per_task.values()) >= deps.settings.diagram_batch
    due = now if soon else now + deps.settings.diagram_delay_s
    task = StageTask(Stage.L2, tenant, session)
    await deps.scheduler.arm(l2_timer_key(tenant, session), task, due)
    return len(unmapped)
