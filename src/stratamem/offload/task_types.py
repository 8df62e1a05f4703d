"""Context offload's task types, as the pipeline sees them (`stratamem.pipeline.task_type`).

`OFFLOAD_L1` (summaries) and `OFFLOAD_L15` (task judgment) run without a lock: their writes are
checked against the store's marks. `OFFLOAD_L2` (task diagrams) holds the session's diagram lock,
its own (`LockScope.TENANT` does not widen it), and writes under its fencing token. Their timers,
`OFFLOAD_L1_TIMER` (the summaries' batch) and `OFFLOAD_L2_TIMER`, are cleared with the session.
"""

from __future__ import annotations

from stratamem.pipeline.task_type import LockRule, Scope, SessionTimer, TaskType

OFFLOAD_L2_TIMER = SessionTimer("offload-l2")
OFFLOAD_L1_TIMER = SessionTimer("offload-l1")
"""The summaries' batch timer (`offload.ingest`). Declared with `OFFLOAD_L1`, so erasing a
session leaves no timer naming it; a dead letter that clears it loses nothing, as the backlog
scheduler submits the session's unsummarised results again."""

OFFLOAD_L1 = TaskType("offload-l1", Scope.SESSION, None, (OFFLOAD_L1_TIMER,))
OFFLOAD_L15 = TaskType("offload-l15", Scope.SESSION, None)
OFFLOAD_L2 = TaskType("offload-l2", Scope.SESSION, LockRule(Scope.SESSION, "diagram", widens=False),
                      (OFFLOAD_L2_TIMER,))  # fmt: skip

TYPES = (OFFLOAD_L1, OFFLOAD_L15, OFFLOAD_L2)
