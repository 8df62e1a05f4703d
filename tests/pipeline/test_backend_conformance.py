"""The one contract suite every `PipelineBackend` passes (SQLite file and real Redis)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from stratamem.layers.task_types import FLUSH, L1, L2, L3
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2
from stratamem.pipeline.backend import DELIVERY_LIMIT_ERROR, PipelineBackend, retry_timer_key
from stratamem.pipeline.errors import DeadLetterNotFound, DeliveryLost, UnknownTaskType
from stratamem.pipeline.task import DeadLetter, Task
from stratamem.store.evidence.receipts import Attempt

from .conftest import Harness


def l1(session: str = "s1", **payload: object) -> Task:
    return Task(L1, "t1", session, dict(payload))


# -- queue ------------------------------------------------------------------------------------


async def test_enqueue_consume_ack_in_order(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    first, second = l1(n=1), l1(n=2)
    await b.enqueue(first, now=now)
    await b.enqueue(second, now=now + 1)
    got = await b.consume("c1", count=10, block_ms=0, now=now)
    assert [d.task for d in got] == [first, second]
    assert [d.enqueued_at for d in got] == [now, now + 1]
    assert all(d.deliveries == 1 and d.consumer == "c1" for d in got)
    assert await b.ack(got[0]) is True
    assert await b.ack(got[0]) is False
    assert (await b.depth()).in_flight == 1


async def test_consume_returns_empty_after_block_timeout(harness: Harness) -> None:
    got = await harness.backend.consume("c1", count=1, block_ms=20, now=harness.clock.now())
    assert got == []


async def test_consume_wakes_when_a_task_arrives(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    peer = await harness.make_peer()
    waiting = asyncio.create_task(b.consume("c1", count=1, block_ms=5000, now=now))
    await peer.enqueue(l1(), now=now)
    got = await asyncio.wait_for(waiting, timeout=5)
    assert len(got) == 1


async def test_a_delivered_task_is_not_delivered_again(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    assert len(await b.consume("c1", count=1, block_ms=0, now=now)) == 1
    assert await b.consume("c2", count=1, block_ms=0, now=now) == []


async def test_depth_and_listing(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    tasks = [l1(n=i) for i in range(3)]
    for task in tasks:
        await b.enqueue(task, now=now)
    await b.consume("c1", count=1, block_ms=0, now=now)
    await b.set_timer("k", l1(), due_at=now + 10)
    depth = await b.depth()
    assert (depth.ready, depth.in_flight, depth.timers, depth.dead) == (2, 1, 1, 0)
    assert await b.list_tasks(limit=10) == tasks
    assert await b.list_tasks(limit=1) == tasks[:1]


# -- wake-ups (the backlog scheduler refills the queue when consumers are free) ----------------

L1_ONLY, OFFLOAD = [L1], [OFFLOAD_L1, OFFLOAD_L2]


async def test_a_notice_wakes_a_waiter_in_another_process(harness: Harness) -> None:
    peer = await harness.make_peer()
    waiting = asyncio.create_task(harness.backend.wait_free(L1_ONLY, timeout_s=30))
    await asyncio.sleep(0)  # the waiter is waiting
    await peer.notify_free([L1, L2])
    assert await asyncio.wait_for(waiting, timeout=10) is True


async def test_a_notice_given_before_the_wait_is_kept_and_taken_once(harness: Harness) -> None:
    peer = await harness.make_peer()
    await peer.notify_free(OFFLOAD)
    assert await harness.backend.wait_free([OFFLOAD_L2], timeout_s=5) is True
    assert await harness.backend.wait_free([OFFLOAD_L2], timeout_s=0.01) is False


async def test_a_notice_of_other_types_wakes_nobody(harness: Harness) -> None:
    await harness.backend.notify_free(OFFLOAD)
    assert await harness.backend.wait_free(L1_ONLY, timeout_s=0.01) is False
    assert await harness.backend.wait_free([], timeout_s=0.01) is False
    assert await harness.backend.wait_free(OFFLOAD, timeout_s=5) is True  # still there


# -- reclaim ----------------------------------------------------------------------------------


async def test_idle_delivery_is_reclaimed_and_old_consumer_loses_it(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [old] = await b.consume("dead-worker", count=1, block_ms=0, now=now)
    kept = await b.reclaim("c2", min_idle_ms=60_000, count=10, max_deliveries=5, now=now + 1)
    assert kept == []
    [new] = await b.reclaim("c2", min_idle_ms=0, count=10, max_deliveries=5, now=now + 61)
    assert new.task == old.task
    assert (new.consumer, new.deliveries) == ("c2", 2)
    assert await b.extend(old, now=now + 62) is False
    assert await b.ack(old) is False
    assert await b.extend(new, now=now + 62) is True
    assert await b.ack(new) is True
    assert (await b.depth()).in_flight == 0


async def test_extend_keeps_a_delivery_from_being_reclaimed(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [d] = await b.consume("c1", count=1, block_ms=0, now=now)
    assert await b.extend(d, now=now + 50) is True
    got = await b.reclaim("c2", min_idle_ms=30_000, count=10, max_deliveries=5, now=now + 60)
    assert got == []


async def test_delivery_limit_sends_poison_task_to_dead_letters(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    poison = l1()
    await b.enqueue(poison, now=now)
    await b.consume("c0", count=1, block_ms=0, now=now)
    for i in range(2):
        got = await b.reclaim(f"c{i + 1}", min_idle_ms=0, count=10, max_deliveries=3, now=now)
        assert [d.task for d in got] == [poison]
    assert await b.reclaim("c9", min_idle_ms=0, count=10, max_deliveries=3, now=now) == []
    [dead] = await b.list_dead(limit=10)
    assert dead.task == poison and dead.error == DELIVERY_LIMIT_ERROR
    depth = await b.depth()
    assert (depth.ready, depth.in_flight, depth.dead) == (0, 0, 1)


async def test_retry_acks_and_schedules_next_attempt(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    task = l1()
    await b.enqueue(task, now=now)
    [d] = await b.consume("c1", count=1, block_ms=0, now=now)
    await b.retry(d, task.next_attempt(), due_at=now + 5)
    assert (await b.depth()).in_flight == 0
    timer = await b.get_timer(retry_timer_key(task))
    assert timer == (now + 5, task.next_attempt())
    assert await b.fire_due_timers(now=now + 4.9, limit=10) == []
    assert await b.fire_due_timers(now=now + 5, limit=10) == [task.next_attempt()]
    [again] = await b.consume("c1", count=1, block_ms=0, now=now + 5)
    assert again.task.attempt == 1 and again.task.id == task.id
    assert again.enqueued_at == now + 5


async def test_release_and_ack_in_one_step(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    await b.enqueue(l1(), now=now)
    first, second = await b.consume("c1", count=2, block_ms=0, now=now)
    grant = await b.acquire_lock("k", "w1", ttl_ms=30_000, now=now)
    assert grant is not None
    assert await b.release_and_ack(first, grant) is True
    assert await b.release_and_ack(first, grant) is False
    assert await b.acquire_lock("k", "w2", ttl_ms=30_000, now=now) is not None
    assert await b.release_and_ack(second, grant) is True  # stale grant: lock left to w2
    assert await b.acquire_lock("k", "w3", ttl_ms=30_000, now=now) is None
    assert await b.release_and_ack(second, None) is False
    assert (await b.depth()).in_flight == 0


# -- locks ------------------------------------------------------------------------------------


async def test_lock_is_exclusive_and_owner_checked(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    grant = await b.acquire_lock("s:t1:s1", "w1", ttl_ms=30_000, now=now)
    assert grant is not None and grant.token == 1 and grant.owner == "w1"
    assert await b.acquire_lock("s:t1:s1", "w2", ttl_ms=30_000, now=now) is None
    assert await b.acquire_lock("s:t1:s1", "w1", ttl_ms=30_000, now=now) is None
    assert await b.renew_lock("s:t1:s1", "w2", ttl_ms=30_000, now=now) is False
    assert await b.renew_lock("s:t1:s1", "w1", ttl_ms=30_000, now=now) is True
    assert await b.release_lock("s:t1:s1", "w2") is False
    assert await b.release_lock("s:t1:s1", "w1") is True
    assert await b.release_lock("s:t1:s1", "w1") is False
    again = await b.acquire_lock("s:t1:s1", "w2", ttl_ms=30_000, now=now)
    assert again is not None and again.token == 2
    assert await b.fence_token("s:t1:s1") == 2
    assert await b.fence_token("never") == 0


async def test_expired_lock_is_taken_over_with_a_greater_token(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    first = await b.acquire_lock("k", "w1", ttl_ms=30_000, now=now)
    await harness.lapse_lock("k")
    later = harness.clock.now()
    assert await b.renew_lock("k", "w1", ttl_ms=30_000, now=later) is False
    second = await b.acquire_lock("k", "w2", ttl_ms=30_000, now=later)
    assert first is not None and second is not None and second.token > first.token
    assert await b.release_lock("k", "w1") is False
    assert await b.renew_lock("k", "w2", ttl_ms=30_000, now=later) is True


async def test_locks_renewed_together_say_which_were_still_held(harness: Harness) -> None:
    """`renew_locks`, one write for a scheduler's leases: each key as `renew_lock` would."""
    b, now = harness.backend, harness.clock.now()
    day_ms = 86_400_000  # outlives the lapse (SQLite's harness lapses locks by its clock)
    for key, owner in (("mine", "w1"), ("lapsed", "w1"), ("theirs", "w2")):
        ttl_ms = 30_000 if key == "lapsed" else day_ms
        assert await b.acquire_lock(key, owner, ttl_ms=ttl_ms, now=now) is not None
    await harness.lapse_lock("lapsed")
    later = harness.clock.now()
    keys = ["mine", "lapsed", "theirs", "never"]
    assert await b.renew_locks(keys, "w1", ttl_ms=30_000, now=later) == {"mine"}
    assert await b.renew_locks([], "w1", ttl_ms=30_000, now=later) == set()
    assert await b.acquire_lock("lapsed", "w2", ttl_ms=30_000, now=later) is not None
    assert await b.renew_lock("mine", "w1", ttl_ms=30_000, now=later) is True
    assert await b.renew_lock("theirs", "w2", ttl_ms=30_000, now=later) is True


async def test_fence_tokens_are_per_key(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    a = await b.acquire_lock("a", "w", ttl_ms=1000, now=now)
    c = await b.acquire_lock("c", "w", ttl_ms=1000, now=now)
    assert a is not None and c is not None and (a.token, c.token) == (1, 1)


async def test_a_raised_fence_puts_every_later_grant_above_it_and_never_lowers(
    harness: Harness,
) -> None:
    """A counter lost with the backend's state is raised to the token the store accepted."""
    b, now = harness.backend, harness.clock.now()
    assert await b.raise_fence("k", 20) is True  # never granted: raised
    held = await b.acquire_lock("k", "w1", ttl_ms=30_000, now=now)
    assert held is not None and held.token == 21
    assert await b.raise_fence("k", 20) is False  # already above: unchanged
    assert await b.raise_fence("k", 21) is False
    assert await b.fence_token("k") == 21
    assert await b.renew_lock("k", "w1", ttl_ms=30_000, now=now) is True  # the lock is untouched
    assert await b.release_lock("k", "w1") is True
    assert await b.raise_fence("k", 30) is True
    later = await b.acquire_lock("k", "w2", ttl_ms=30_000, now=now)
    assert later is not None and later.token == 31
    assert await b.fence_token("other") == 0


# -- timers -----------------------------------------------------------------------------------


async def test_set_if_earlier_never_moves_a_timer_later(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    first, second, third = l1(n=1), l1(n=2), l1(n=3)
    assert await b.set_timer_if_earlier("l2", first, due_at=now + 60) is True
    assert await b.set_timer_if_earlier("l2", second, due_at=now + 90) is False
    assert await b.get_timer("l2") == (now + 60, first)
    assert await b.set_timer_if_earlier("l2", third, due_at=now + 30) is True
    assert await b.get_timer("l2") == (now + 30, third)
    await b.set_timer("l2", second, due_at=now + 90)
    assert await b.get_timer("l2") == (now + 90, second)


async def test_remove_timer(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.set_timer("x", l1(), due_at=now)
    assert await b.remove_timer("x") is True
    assert await b.remove_timer("x") is False
    assert await b.get_timer("x") is None
    assert await b.fire_due_timers(now=now + 1, limit=10) == []


async def test_an_unreadable_timer_is_set_aside_and_the_others_fire(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """One timer whose task cannot be read (damaged, or of a type this version does not know)
    failed every pump on SQLite, so no timer of any tenant fired again; on Redis the pump's
    script failed on it and the row was lost unrecorded."""
    b = harness.backend
    first, last = Task(L2, "t", "a"), Task(L2, "t", "b")
    await b.set_timer("l2/t/a", first, due_at=10)
    await b.set_timer("l2/t/b", last, due_at=30)
    await harness.plant_timer("newer/t", 20, '{"type": "L9", "tenant": "t"}')
    await harness.plant_timer("damaged/t", 25, "{not json")
    with caplog.at_level(logging.ERROR, logger="stratamem.pipeline"):
        fired = await b.fire_due_timers(now=100, limit=10)
    assert sorted(t.id for t in fired) == sorted([first.id, last.id])
    assert (await b.depth()).timers == 0
    assert await harness.unreadable_timers() == ["damaged/t", "newer/t"]
    named = sorted(k for k in ("damaged/t", "newer/t") for r in caplog.records
                   if k in r.getMessage())  # fmt: skip
    assert named == ["damaged/t", "newer/t"]
    assert await b.fire_due_timers(now=200, limit=10) == []


async def test_fire_due_enqueues_due_timers_once(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    due = [l1(n=i) for i in range(3)]
    for i, task in enumerate(due):
        await b.set_timer(f"due{i}", task, due_at=now + i)
    await b.set_timer("later", l1(n=99), due_at=now + 100)
    assert await b.fire_due_timers(now=now + 2, limit=2) == due[:2]
    assert await b.fire_due_timers(now=now + 2, limit=10) == due[2:]
    assert await b.fire_due_timers(now=now + 2, limit=10) == []
    got = await b.consume("c1", count=10, block_ms=0, now=now)
    assert [d.task for d in got] == due
    assert (await b.depth()).timers == 1


async def test_concurrent_pumps_fire_each_timer_once(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    peers = [b, await harness.make_peer(), await harness.make_peer()]
    tasks = [l1(n=i) for i in range(30)]
    for i, task in enumerate(tasks):
        await b.set_timer(f"k{i}", task, due_at=now)
    batches = await asyncio.gather(
        *(p.fire_due_timers(now=now, limit=7) for p in peers for _ in range(3))
    )
    fired = [t.id for batch in batches for t in batch]
    fired += [t.id for t in await b.fire_due_timers(now=now, limit=100)]
    assert sorted(fired) == sorted(t.id for t in tasks)


# -- state ------------------------------------------------------------------------------------


async def test_session_state_counters_and_cursors(harness: Harness) -> None:
    b = harness.backend
    assert await b.state_get("t1/s1") == {}
    assert await b.state_incr("t1/s1", "l1_done") == 1
    assert await b.state_incr("t1/s1", "l1_done", 4) == 5
    await b.state_set("t1/s1", "cursor", "turn-42")
    assert await b.state_get("t1/s1") == {"l1_done": "5", "cursor": "turn-42"}
    assert await b.state_get("t1/s2") == {}


# -- dead letters -----------------------------------------------------------------------------


async def test_dead_letters_list_requeue_purge(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    tasks = [Task(L2, "t1", "s1", {"n": i}, attempt=3) for i in range(3)]
    for task in tasks:
        await b.enqueue(task, now=now)
    for d in await b.consume("c1", count=3, block_ms=0, now=now):
        await b.dead_letter(d, f"boom {d.task.payload['n']}", now=now + 1)
    dead = await b.list_dead(limit=10)
    assert [d.task for d in dead] == tasks
    assert dead[0].error == "boom 0" and dead[0].failed_at == now + 1
    assert (await b.depth()).dead == 3 and (await b.depth()).in_flight == 0
    requeued = await b.requeue_dead(dead[0].id, now=now + 2)
    assert requeued.attempt == 0 and requeued.id == tasks[0].id
    assert await b.list_tasks(limit=10) == [requeued]
    with pytest.raises(DeadLetterNotFound):
        await b.requeue_dead(dead[0].id, now=now + 2)
    assert await b.purge_dead([dead[1].id]) == 1
    assert [d.task for d in await b.list_dead(limit=10)] == tasks[2:]
    assert await b.purge_dead() == 1
    assert await b.list_dead(limit=10) == []


async def _bury(b: PipelineBackend, task: Task, now: float) -> DeadLetter:
    await b.enqueue(task, now=now)
    [got] = await b.consume("c1", count=1, block_ms=0, now=now)
    dead = await b.dead_letter(got, "boom", now=now)
    assert dead is not None
    return dead


async def test_dead_letters_are_listed_per_tenant_and_paged_with_random_ids(
    harness: Harness,
) -> None:
    b, now = harness.backend, harness.clock.now()
    others = [await _bury(b, Task(L1, "other", f"s{i}"), now) for i in range(5)]
    mine = [await _bury(b, Task(L1, "t1", f"s{i}"), now) for i in range(3)]
    assert [d.id for d in await b.list_dead(limit=10, tenant="t1")] == [d.id for d in mine]
    first = await b.list_dead(limit=2, tenant="t1")
    rest = await b.list_dead(limit=2, tenant="t1", after=first[-1].id)
    assert [d.id for d in first + rest] == [d.id for d in mine]
    assert await b.count_dead(tenant="t1") == 3 and await b.count_dead() == 8
    with pytest.raises(DeadLetterNotFound):  # another tenant's id is no cursor of mine
        await b.list_dead(limit=2, tenant="t1", after=others[0].id)
    with pytest.raises(DeadLetterNotFound):
        await b.requeue_dead(others[0].id, now=now, tenant="t1")
    assert (await b.requeue_dead(mine[1].id, now=now, tenant="t1")).session == "s1"
    assert [d.id for d in await b.list_dead(limit=10, tenant="t1")] == [mine[0].id, mine[2].id]
    ids = [d.id for d in others + mine]
    assert len(set(ids)) == 8 and all(not i.isdigit() and len(i) >= 20 for i in ids)
    assert await b.purge_dead([mine[0].id]) == 1 and await b.count_dead(tenant="t1") == 1


# -- ownership: a reclaimed delivery is out of its old consumer's hands ---------------------------


async def test_a_reclaimed_delivery_cannot_be_retried_buried_or_acked_by_its_old_owner(
    harness: Harness,
) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [old] = await b.consume("a", count=1, block_ms=0, now=now)
    [new] = await b.reclaim("b", min_idle_ms=0, count=1, max_deliveries=5, now=now + 61)
    assert await b.retry(old, old.task.next_attempt(), due_at=now + 70) is False
    assert await b.get_timer(retry_timer_key(old.task)) is None
    assert await b.dead_letter(old, "boom", now=now + 62) is None
    assert await b.ack(old) is False
    assert await b.extend(old, now=now + 62) is False
    assert await b.list_dead(limit=10) == []
    assert (await b.depth()).in_flight == 1
    # the same consumer name reclaiming again: its earlier hand-over is stale as well
    [newer] = await b.reclaim("b", min_idle_ms=0, count=1, max_deliveries=5, now=now + 200)
    assert await b.ack(new) is False
    assert await b.retry(new, new.task.next_attempt(), due_at=now + 300) is False
    dead = await b.dead_letter(newer, "boom", now=now + 201)
    assert dead is not None and dead.task == newer.task
    assert (await b.depth()).in_flight == 0


async def test_the_owner_retries_and_buries_its_own_delivery(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [first] = await b.consume("a", count=1, block_ms=0, now=now)
    assert await b.retry(first, first.task.next_attempt(), due_at=now + 5) is True
    assert await b.fire_due_timers(now=now + 5, limit=10) == [first.task.next_attempt()]


# -- routing: consumers take only the task types they run --------------------------------------

LAYER_TYPES = (L1, L2, L3, FLUSH)


async def test_consumers_take_only_the_types_they_run(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    offload = Task(OFFLOAD_L1, "t1", "s1")
    await b.enqueue(offload, now=now)
    await b.enqueue(l1(), now=now)
    [got] = await b.consume("layers", count=10, block_ms=0, now=now, types=LAYER_TYPES)
    assert got.task.type is L1
    assert await b.consume("layers", count=10, block_ms=20, now=now, types=LAYER_TYPES) == []
    [other] = await b.consume("off", count=10, block_ms=0, now=now, types=[OFFLOAD_L1])
    assert other.task == offload
    later = now + 3600
    [back] = await b.reclaim(
        "layers", min_idle_ms=0, count=10, max_deliveries=5, now=later, types=LAYER_TYPES
    )
    assert back.task.type is L1
    assert await b.ack(other) is True


async def test_a_routed_consumer_wakes_for_its_own_type(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    peer = await harness.make_peer()
    waiting = asyncio.create_task(
        b.consume("off", count=1, block_ms=5000, now=now, types=[OFFLOAD_L2])
    )
    await peer.enqueue(l1(), now=now)
    await peer.enqueue(Task(OFFLOAD_L2, "t1", "s1"), now=now)
    [got] = await asyncio.wait_for(waiting, timeout=5)
    assert got.task.type is OFFLOAD_L2
    assert [t.type for t in await b.list_tasks(limit=10)] == [L1, OFFLOAD_L2]


async def test_timers_and_requeues_reach_the_stream_of_their_type(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.set_timer("k", Task(OFFLOAD_L2, "t1", "s1"), due_at=now)
    await b.fire_due_timers(now=now, limit=10)
    [got] = await b.consume("off", count=1, block_ms=0, now=now, types=[OFFLOAD_L2])
    dead = await b.dead_letter(got, "boom", now=now)
    assert dead is not None
    await b.requeue_dead(dead.id, now=now)
    [again] = await b.consume("off", count=1, block_ms=0, now=now, types=[OFFLOAD_L2])
    assert again.task.id == got.task.id


def test_unknown_task_types_are_refused_with_a_typed_error() -> None:
    with pytest.raises(UnknownTaskType, match="unknown task type 'L9'"):
        Task("L9", "t1", "s1")  # type: ignore[arg-type]
    body = l1().to_json().replace('"L1"', '"L9"')
    with pytest.raises(UnknownTaskType):
        Task.from_json(body)


# -- execution stamps (what the recovery reconciler reads) -------------------------------------


async def test_a_stamp_follows_its_delivery_to_the_next_owner_and_ends_with_it(
    harness: Harness,
) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [old] = await b.consume("a", count=1, block_ms=0, now=now)
    [fresh] = await b.in_flight(limit=10, now=now)
    assert fresh.delivery.stamp is None and fresh.delivery.consumer == "a"
    stamp = Attempt(old.task.id, 0, old.deliveries, 7, "w-a", now)
    assert await b.stamp(old, stamp, now=now) is True
    [seen] = await b.in_flight(limit=10, now=now + 1)
    assert seen.delivery.stamp == stamp and seen.delivery.task == old.task
    [new] = await b.reclaim("b", min_idle_ms=0, count=1, max_deliveries=5, now=now + 61)
    assert new.stamp == stamp and new.deliveries == 2
    assert await b.stamp(old, stamp, now=now + 62) is False  # no longer the old owner's
    assert await b.ack(new) is True
    assert await b.in_flight(limit=10, now=now + 62) == []


# -- starting a delivery in one step ----------------------------------------------------------


async def test_acquire_for_extends_takes_the_lock_and_stamps_with_the_grants_token(
    harness: Harness,
) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [d] = await b.consume("c1", count=1, block_ms=0, now=now)
    before = await b.acquire_lock("other", "w0", ttl_ms=30_000, now=now)
    assert before is not None
    stamp = Attempt(d.task.id, 0, d.deliveries, None, "w-a", now + 50)
    grant = await b.acquire_for(d, "k", "w1", ttl_ms=30_000, now=now + 50, stamp=stamp)
    assert grant is not None and (grant.key, grant.owner) == ("k", "w1")
    assert await b.acquire_lock("k", "w2", ttl_ms=30_000, now=now + 50) is None
    [seen] = await b.in_flight(limit=10, now=now + 51)
    assert seen.delivery.stamp == Attempt(d.task.id, 0, d.deliveries, grant.token, "w-a", now + 50)
    got = await b.reclaim("c2", min_idle_ms=30_000, count=10, max_deliveries=5, now=now + 60)
    assert got == []  # extended at now + 50
    assert await b.release_and_ack(d, grant) is True
    assert await b.acquire_lock("k", "w2", ttl_ms=30_000, now=now + 60) is not None


async def test_acquire_for_a_held_lock_extends_the_delivery_and_grants_nothing(
    harness: Harness,
) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [d] = await b.consume("c1", count=1, block_ms=0, now=now)
    assert await b.acquire_lock("k", "w0", ttl_ms=90_000, now=now) is not None
    stamp = Attempt(d.task.id, 0, d.deliveries, None, "w-a", now + 50)
    assert await b.acquire_for(d, "k", "w1", ttl_ms=30_000, now=now + 50, stamp=stamp) is None
    [seen] = await b.in_flight(limit=10, now=now + 51)
    assert seen.delivery.stamp is None
    assert await b.reclaim("c2", min_idle_ms=30_000, count=10, max_deliveries=5,
                           now=now + 60) == []  # fmt: skip


async def test_acquire_for_a_reclaimed_delivery_takes_nothing(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1(), now=now)
    [old] = await b.consume("c1", count=1, block_ms=0, now=now)
    [new] = await b.reclaim("c2", min_idle_ms=0, count=1, max_deliveries=5, now=now + 61)
    with pytest.raises(DeliveryLost):
        await b.acquire_for(old, "k", "w1", ttl_ms=30_000, now=now + 62)
    grant = await b.acquire_for(new, "k", "w2", ttl_ms=30_000, now=now + 62)
    assert grant is not None and grant.owner == "w2"


async def test_release_ack_and_consume_hands_the_consumer_its_next_task(harness: Harness) -> None:
    b, now = harness.backend, harness.clock.now()
    await b.enqueue(l1("s1"), now=now)
    await b.enqueue(l1("s2"), now=now + 1)
    [d] = await b.consume("c1", count=1, block_ms=0, now=now)
    grant = await b.acquire_lock("k", "w1", ttl_ms=30_000, now=now)
    acked, got = await b.release_ack_and_consume(d, grant, consumer="c1", now=now)
    assert acked and [(n.task.session, n.consumer) for n in got] == [("s2", "c1")]
    assert await b.acquire_lock("k", "w2", ttl_ms=30_000, now=now) is not None  # released
    assert await b.consume("c2", count=1, block_ms=0, now=now) == []  # s2 is c1's
    assert await b.ack(d) is False
    again, none = await b.release_ack_and_consume(d, None, consumer="c1", now=now)
    assert (again, none) == (False, [])  # no longer pending: nothing acked, nothing ready
    last, after = await b.release_ack_and_consume(got[0], None, consumer="c1", now=now)
    assert (last, after) == (True, [])
    assert (await b.depth()).in_flight == 0
