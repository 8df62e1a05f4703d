"""`InProcessRunner`: the scheduler port without a pipeline, for the CLI, scripts and tests.

Tasks and timers live in memory (timers keep "set only if earlier"); `run` executes what is
ready and what is due by the injected clock, until nothing is left. A stage that fails with a
`StratamemError` is reported and not retried here: its input stays in the store (pending pairs,
unjudged boundaries, unmapped entries), and the next run picks it up.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field

from stratamem.clock import Clock
from stratamem.errors import StratamemError
from stratamem.offload.facade import Offload, StageOutcome
from stratamem.offload.schedule import StageTask

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunReport:
    done: list[tuple[StageTask, StageOutcome]] = field(default_factory=list)
    failed: list[tuple[StageTask, str]] = field(default_factory=list)


class InProcessRunner:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._ready: collections.deque[StageTask] = collections.deque()
        self._timers: dict[str, tuple[float, StageTask]] = {}

    async def enqueue(self, task: StageTask) -> None:
        self._ready.append(task)

    async def arm(self, key: str, task: StageTask, due_at: float) -> None:
        current = self._timers.get(key)
        if current is None or due_at < current[0]:
            self._timers[key] = (due_at, task)

    def timers(self) -> dict[str, float]:
        return {key: due for key, (due, _) in self._timers.items()}

    def ready(self) -> list[StageTask]:
        return list(self._ready)

    def _fire_due(self, flush: bool, fired: set[str]) -> None:
        now = self._clock.now()
        for key, (due, task) in sorted(self._timers.items(), key=lambda kv: kv[1][0]):
            if due <= now or (flush and key not in fired):
                del self._timers[key]
                fired.add(key)
                self._ready.append(task)

    async def run(
        self, offload: Offload, *, flush: bool = False, max_tasks: int = 10_000
    ) -> RunReport:
        """Run ready tasks and due timers until none is left (or `max_tasks` ran); with
        `flush`, every timer counts as due once (a script that will not wait for them): a timer
        that fired in this run and was armed again (a retry after a failure, due later) waits
        for its time or the next run, as it would in the pipeline, instead of spinning."""
        report, fired = RunReport(), set[str]()
        for _ in range(max_tasks):
            self._fire_due(flush, fired)
            if not self._ready:
                break
            task = self._ready.popleft()
            try:
                report.done.append((task, await offload.run_stage(task)))
            except StratamemError as exc:
                log.warning("%s %s/%s failed: %s", task.stage, task.tenant, task.session, exc)
                report.failed.append((task, f"{type(exc).__name__}: {exc}"))
        return report
