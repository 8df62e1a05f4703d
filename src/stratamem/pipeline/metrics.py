"""Counters of one worker process and a snapshot of the tasks it is running."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RunningTask:
    task_id: str
    type: str
    tenant: str
    session: str | None
    lock_key: str | None
    attempt: int
    started_at: float


@dataclass
class WorkerMetrics:
    consumed: int = 0
    completed: int = 0
    skipped: int = 0
    failed: int = 0
    retried: int = 0
    postponed: int = 0
    dead_lettered: int = 0
    lock_conflicts: int = 0
    dropped: int = 0
    renew_failures: int = 0
    aborted: int = 0
    reclaimed: int = 0
    recovered: int = 0
    timers_fired: int = 0
    loop_errors: int = 0
    """Store or backend errors a consumer or duty loop survived (each logged once)."""
    running: dict[str, RunningTask] = field(default_factory=dict)
    executed: dict[str, int] = field(default_factory=dict)
    """Executions started (the executor called) per task type."""

    def snapshot(self) -> dict[str, Any]:
        counters = {k: v for k, v in asdict(self).items() if k not in ("running", "executed")}
        running = [asdict(r) for r in self.running.values()]
        return {"counters": counters, "running": running, "executed": dict(self.executed)}
