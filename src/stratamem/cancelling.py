"""Cancelling a background task for good (a lock's renewer, a worker's keeper or duty loop, the
embedding catch-up, the offload runner, the service's loops at shutdown).

Python 3.11's `wait_for` and `timeout`, used inside client libraries (redis-py), can lose a
cancellation that arrives as their own timeout fires: the task goes on as if never cancelled.
A caller that cancels once and awaits then waits as long as the task runs, which for a renewal
loop is forever (and the lock it renews stays held)."""

from __future__ import annotations

import asyncio
from typing import Any

CANCEL_RETRY_S = 0.5


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait for it to end, cancelling again while it swallowed the
    cancellation; re-raise its error if it ended with one."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_RETRY_S)
    error = None if task.cancelled() else task.exception()
    if error is not None:
        raise error
