"""The SQLite backend idles cheaply: waiting consumers poll the file less and less while it has
no work (2 ms doubling to 100 ms: an idle `serve` read it 500 times a second), an enqueue of
this process wakes a waiter at once, and work seen brings the short interval back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stratamem.layers.task_types import L1
from stratamem.pipeline.sqlite_backend import POLL_IDLE_MAX_S, POLL_INTERVAL_S, SqliteBackend
from stratamem.pipeline.task import Task

NOW = 1_000_000.0


async def test_idle_polls_back_off_and_a_local_enqueue_wakes_a_waiter_at_once(
    tmp_path: Path,
) -> None:
    backend = SqliteBackend(tmp_path / "pipeline.db")
    polls = 0
    has_ready = backend._core.has_ready

    def counted(*args: object) -> bool:
        nonlocal polls
        polls += 1
        return has_ready(*args)  # type: ignore[arg-type]

    backend._core.has_ready = counted  # type: ignore[method-assign]
    try:
        assert await backend.consume("c", count=1, block_ms=400, now=NOW) == []
        assert backend._poll_s == POLL_IDLE_MAX_S
        assert polls <= 12  # 2, 4, 8 … 100 ms: not 200 polls of 2 ms
        waiting = asyncio.ensure_future(backend.consume("c", count=1, block_ms=60_000, now=NOW))
        await asyncio.sleep(0)  # it is waiting now (on a 100 ms poll)
        await backend.enqueue(Task(L1, "t", "s"), now=NOW)
        [delivery] = await asyncio.wait_for(waiting, 5)
        assert delivery.task.session == "s"
        assert backend._poll_s == POLL_INTERVAL_S  # work seen: polls are short again
    finally:
        await backend.close()
