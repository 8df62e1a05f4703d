"""Context offload inside an embedded memory: the stages run in-process, in the background.

`stratamem serve` runs the offload stages on its pipeline. A memory opened in-process
(`stratamem.Memory`, `AsyncMemory.open`) has no pipeline: `EmbeddedOffload` keeps an
`InProcessRunner` and a background task that runs what is ready after each ingest or user
message, and wakes again when the earliest timer is due, while the memory is open. `run`
runs everything now (`flush=True`: timers too), for scripts that will not wait.
"""

from __future__ import annotations

import asyncio
import contextlib

from stratamem.cancelling import cancel_and_wait
from stratamem.clock import Clock
from stratamem.llm.base import LLM
from stratamem.offload.facade import Offload
from stratamem.offload.runner import InProcessRunner, RunReport
from stratamem.offload.settings import OffloadSettings
from stratamem.store.offload.port import OffloadStore

#: Longest sleep of the background task between two looks at its timers.
MAX_WAIT_S = 60.0


class EmbeddedOffload:
    """An `Offload` over the embedded store whose stages run in this process."""

    def __init__(
        self,
        store: OffloadStore,
        clock: Clock,
        llm: LLM | None = None,
        settings: OffloadSettings | None = None,
    ) -> None:
        self.clock = clock
        self.runner = InProcessRunner(clock)
        self.offload = Offload(
            store, self.runner, llm=llm, settings=settings, clock=clock
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def poke(self) -> None:
        """Run what is ready soon; starts the background task on first use."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        self._wake.set()

    async def run(self, *, flush: bool = False) -> RunReport:
        """Run the ready stages and the due timers (every timer with `flush`) now."""
        async with self._lock:
            return await self.runner.run(self.offload, flush=flush)

    def _next_wait_s(self) -> float:
        timers = self.runner.timers()
        if not timers:
            return MAX_WAIT_S
        return min(max(min(timers.values()) - self.clock.now(), 0.0), MAX_WAIT_S)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_wait_s())
            self._wake.clear()
            await self.run()  # a failed stage is logged; its input stays stored

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
