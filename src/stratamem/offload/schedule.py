"""How the offload stages ask for more work: a narrow port over the pipeline.

Stages enqueue follow-ups and arm timers with "set only if earlier" semantics; they never see a
queue, a lock or Redis. `stratamem.offload.executors.PipelineScheduler` implements the port on
the pipeline backend; `stratamem.offload.runner.InProcessRunner` runs everything in-process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from stratamem.offload.task_types import OFFLOAD_L1_TIMER, OFFLOAD_L2_TIMER
from stratamem.store.offload.records import OffloadStage as Stage

__all__ = ["Stage", "StageTask", "l1_timer_key", "l2_timer_key"]


@dataclass(frozen=True, slots=True)
class StageTask:
    stage: Stage
    tenant: str
    session: str
    payload: dict[str, Any] = field(default_factory=dict)


def l1_timer_key(tenant: str, session: str) -> str:
    return OFFLOAD_L1_TIMER.key(tenant, session)


def l2_timer_key(tenant: str, session: str) -> str:
    """Declared with offload-l2 (`OFFLOAD_L2_TIMER`), so a dead letter clears the timer."""
    return OFFLOAD_L2_TIMER.key(tenant, session)


class Scheduler(Protocol):
    async def enqueue(self, task: StageTask) -> None:
        """Run `task` as soon as a worker is free."""

    async def arm(self, key: str, task: StageTask, due_at: float) -> None:
        """Run `task` at `due_at`, unless the timer `key` is already due earlier."""
