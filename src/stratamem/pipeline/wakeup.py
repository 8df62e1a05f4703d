"""Wake-ups of the backlog scheduler: consumers that are free say so, through the backend.

A worker's consumer is free when it starts and each time it finishes a task; the worker then
signals `FreeSignal`, which tells the backend (`PipelineBackend.notify_free`) for the task
types the worker runs. The scheduler of those kinds, in this process or another, waits on the
backend (`wait_free`) between its passes, so it refills the queue as soon as consumers take
from it, not at its next interval. Signals are coalesced: at most one notice is in flight, and
signals made while it is sent, or in the `NOTICE_GAP_S` after it, make one more after that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection

from stratamem.cancelling import cancel_and_wait
from stratamem.errors import PipelineError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.task_type import TaskType

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]

NOTICE_GAP_S = 0.05
"""The least time between two notices of one process: consumers finishing tasks back to back
sent one notice per round trip (0.3 to 0.6 a task on Redis, `bench/pipeline.py`), for a
scheduler that waits seconds between its passes."""


class FreeSignal:
    """Tells the backend that consumers of `types()` are free; `signal` never waits."""

    def __init__(
        self,
        backend: PipelineBackend,
        types: Callable[[], Collection[TaskType]],
        sleep: Sleep = asyncio.sleep,
        gap_s: float = NOTICE_GAP_S,
    ) -> None:
        self._backend, self._types = backend, types
        self._sleep, self._gap_s = sleep, gap_s
        self._pending = False
        self._sending: asyncio.Task[None] | None = None

    def signal(self) -> None:
        self._pending = True
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self._pending:
            self._pending = False
            try:
                await self._backend.notify_free(self._types())
            except PipelineError:  # the scheduler's interval covers a lost notice
                log.warning("could not tell the scheduler that consumers are free",
                            exc_info=True)  # fmt: skip
                return
            await self._sleep(self._gap_s)  # signals meanwhile make one notice after it

    async def close(self) -> None:
        """Stop sending (a notice in flight is cancelled)."""
        if self._sending is not None:
            await cancel_and_wait(self._sending)
            self._sending = None
