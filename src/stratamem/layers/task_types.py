"""The memory layers' task types, as the pipeline sees them (`stratamem.pipeline.task_type`).

- `L1` extracts a session's new turns; `FLUSH` runs L1 until caught up, then L2 and L3 if due.
  Both hold the session's shared lock (the tenant's with `LockScope.TENANT`).
- `L2` consolidates a whole tenant's memories into scenes and names the session that asked, if
  any; it holds the tenant's own L2 lock, so two sessions' L2s queue behind one and the second
  finds nothing left to pay for. Its timers: `L2_TIMER` (armed after an L1, "set only if
  earlier") and `L2_MAX_TIMER` (the maximum interval after an L2).
- `L3` synthesises the tenant's profile under the tenant's shared lock.

The cascade between them is `layers.cascade`, registered with the executors.
"""

from __future__ import annotations

from stratamem.pipeline.task_type import LockRule, Scope, SessionTimer, TaskType

L2_TIMER = SessionTimer("l2")
L2_MAX_TIMER = SessionTimer("l2max")

L1 = TaskType("L1", Scope.SESSION, LockRule(Scope.SESSION))
L2 = TaskType("L2", Scope.TENANT, LockRule(Scope.TENANT, "l2"), (L2_TIMER, L2_MAX_TIMER))
L3 = TaskType("L3", Scope.TENANT, LockRule(Scope.TENANT))
FLUSH = TaskType("flush", Scope.SESSION, LockRule(Scope.SESSION))

TYPES = (L1, L2, L3, FLUSH)
