"""`cancel_and_wait`: a task that swallows a cancellation (as Python 3.11's `wait_for` inside a
client library can) is cancelled again until it ends, so shutdown never waits on it forever."""

from __future__ import annotations

import asyncio

import pytest

from stratamem.cancelling import cancel_and_wait


async def _swallows_one_cancellation(swallowed: list[int]) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        swallowed.append(1)  # goes on as if it had not been cancelled
    await asyncio.Event().wait()  # a loop waiting for its next round: forever


async def test_a_swallowed_cancellation_is_repeated_until_the_task_ends() -> None:
    swallowed: list[int] = []
    task = asyncio.create_task(_swallows_one_cancellation(swallowed))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), timeout=10)
    assert task.cancelled() and swallowed == [1]


async def test_the_task_s_own_error_is_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)


async def test_a_finished_task_is_left_as_it_is() -> None:
    task = asyncio.create_task(asyncio.sleep(0))
    await task
    await cancel_and_wait(task)
    assert not task.cancelled()
