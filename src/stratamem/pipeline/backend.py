"""The pipeline backend contract: one narrow port, grouped by concern, implemented per store.

Every implementation (`SqliteBackend`, `RedisBackend`) passes the one conformance suite in
`tests/pipeline/test_backend_conformance.py`. Methods whose behaviour depends on time take `now`
(seconds since the epoch, from the injected `Clock`), so retries and timers are tested by passing a
later `now`, never by sleeping. Lock TTLs are in milliseconds; on Redis they are enforced by the
server's own clock (SET PX), on SQLite by comparing stored expiry with `now`.

Failures of the underlying store surface as `BackendUnavailable` (a `PipelineError`).

Routing: tasks are kept per type, and `consume` / `reclaim` take the types the caller can run
(`types`, None for all), so a worker never takes a task it has no executor for; a task of a type
nobody runs waits for a worker that does. A task of an unknown type cannot be built
(`UnknownTaskType`, see `task.task_type`), so it is refused before it reaches `enqueue`.

Ownership: `ack`, `extend`, `retry`, `dead_letter` (and `release_and_ack`) act only while the
delivery is still pending for that very hand-over (its consumer and its lease/delivery count);
once `reclaim` handed the task to someone else, they change nothing and say so.

Wake-ups: `notify_free` tells whoever waits in `wait_free` (the backlog schedulers, in any
process) that consumers of some task types are free, so the queue is refilled at once instead
of at the next interval; a notice given while nobody waits is kept until the next wait.

Delivery semantics are at-least-once: a task stays pending from `consume` until `ack` (or
`retry` / `dead_letter`, which acknowledge atomically with their own write). A delivery whose
consumer went silent for longer than an idle threshold is handed to another consumer by `reclaim`;
each hand-over counts as a delivery, and a task delivered more than `max_deliveries` times is
moved to the dead letters (a poison task that kills its worker every time).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Protocol

from stratamem.pipeline.task import (
    DeadLetter,
    Delivery,
    InFlight,
    LockGrant,
    QueueDepth,
    Task,
)
from stratamem.pipeline.task_type import TaskType
from stratamem.store.evidence.receipts import Attempt

Types = Collection[TaskType] | None


class PipelineBackend(Protocol):
    # -- queue ------------------------------------------------------------------------------

    async def enqueue(self, task: Task, *, now: float) -> None:
        """Append `task` to the queue, ready at once. `now` is recorded as its enqueue time."""

    async def consume(
        self, consumer: str, *, count: int, block_ms: int, now: float, types: Types = None
    ) -> list[Delivery]:
        """Hand up to `count` ready tasks of `types` (all when None) to `consumer`, oldest
        first within a type.

        Waits up to `block_ms` for a task when none is ready (0: do not wait); returns [] on
        timeout. Each returned task stays pending for `consumer` until acknowledged.
        """

    async def ack(self, delivery: Delivery) -> bool:
        """Acknowledge and forget a delivered task. False if it was no longer pending."""

    async def release_and_ack(self, delivery: Delivery, grant: LockGrant | None) -> bool:
        """`release_lock(grant.key, grant.owner)` (when `grant` is given), then `ack(delivery)`,
        in one round trip. Returns what `ack` would."""

    async def release_ack_and_consume(
        self, delivery: Delivery, grant: LockGrant | None, *, consumer: str, now: float,
        types: Types = None, block_ms: int = 0,
    ) -> tuple[bool, list[Delivery]]:
        """`release_and_ack(delivery, grant)`, then `consume(consumer, count=1,
        block_ms=block_ms, types=types)`, in one round trip: what `release_and_ack` returns, and
        the next task handed to `consumer` (pending for it, as `consume` hands it), if one was
        ready or came within `block_ms`. The ack is done before the wait begins."""

    async def extend(self, delivery: Delivery, *, now: float) -> bool:
        """Heartbeat: reset the idle time of a pending delivery so `reclaim` leaves it alone.

        False if the delivery is no longer pending for its consumer (it was reclaimed or acked).
        """

    async def stamp(self, delivery: Delivery, attempt: Attempt, *, now: float) -> bool:
        """Record on the pending delivery that its execution `attempt` starts now (and reset its
        idle time, as `extend`). A later `reclaim` hands the stamp to the new owner
        (`Delivery.stamp`) and `in_flight` reports it. False if the delivery is no longer
        pending for its consumer."""

    async def in_flight(self, *, limit: int, now: float) -> list[InFlight]:
        """Up to `limit` pending deliveries (delivered, not acknowledged) with their idle time
        and stamp, oldest first: what the recovery reconciler inspects. Changes nothing."""

    async def reclaim(
        self,
        consumer: str,
        *,
        min_idle_ms: int,
        count: int,
        max_deliveries: int,
        now: float,
        types: Types = None,
    ) -> list[Delivery]:
        """Hand to `consumer` up to `count` deliveries of `types` (all when None) idle for at
        least `min_idle_ms`.

        A reclaimed task whose delivery count now exceeds `max_deliveries` is not returned: it
        is moved to the dead letters, acknowledged, with the error "delivery limit exceeded".
        """

    async def retry(self, delivery: Delivery, task: Task, *, due_at: float) -> bool:
        """Atomically acknowledge `delivery` and schedule `task` (usually the next attempt) to
        be enqueued at `due_at`, through the keyed timer `retry/<task.id>`. False, and nothing
        done, if the delivery is no longer pending for its consumer (it was reclaimed)."""

    async def depth(self) -> QueueDepth:
        """Counts of ready, in-flight (delivered, unacknowledged), timers and dead letters."""

    async def list_tasks(self, *, limit: int) -> list[Task]:
        """Up to `limit` queued tasks (ready and in flight), oldest first."""

    # -- locks and fencing ------------------------------------------------------------------

    async def acquire_lock(
        self, key: str, owner: str, *, ttl_ms: int, now: float
    ) -> LockGrant | None:
        """Take the lock `key` for `owner` for `ttl_ms` if nobody holds it (or the holder's TTL
        has passed). Every grant carries a fencing token strictly greater than every earlier
        grant's token for the same key. None when the lock is held by someone (even `owner`).

        Callers name each acquisition with its own `owner` (the worker and a waited flush mint
        one): fenced writes carry it (`Fence.owner`), so should the counter go backwards and
        grant a token twice, the store accepts that token from one of the two holders only."""

    async def acquire_for(
        self,
        delivery: Delivery,
        key: str,
        owner: str,
        *,
        ttl_ms: int,
        now: float,
        stamp: Attempt | None = None,
    ) -> LockGrant | None:
        """What a worker does to start a delivery, in one round trip: `extend(delivery)`, then
        `acquire_lock(key, owner)`, then, when granted and `stamp` is given,
        `stamp(delivery, stamp)` with the grant's token in it. `DeliveryLost` (nothing taken)
        when the delivery is no longer pending for its consumer; None when the lock is held
        (the delivery extended all the same: its worker waits for the lock)."""

    async def renew_lock(self, key: str, owner: str, *, ttl_ms: int, now: float) -> bool:
        """Extend the lock to `now + ttl_ms` if `owner` still holds it (and it has not expired).
        False otherwise: the caller has lost the lock and must stop writing."""

    async def renew_locks(
        self, keys: Sequence[str], owner: str, *, ttl_ms: int, now: float
    ) -> set[str]:
        """`renew_lock` of each of `keys` for `owner`, in one write (one transaction on SQLite,
        one round trip on Redis): the keys renewed; the others were lost."""

    async def release_lock(self, key: str, owner: str) -> bool:
        """Release the lock if `owner` holds it; False if it was not held by `owner`."""

    async def fence_token(self, key: str) -> int:
        """The newest fencing token granted for `key` (0 if never granted)."""

    async def raise_fence(self, key: str, token: int) -> bool:
        """Raise the token counter of `key` to `token` if it is lower (never lowers it), so every
        later grant is above `token`. True if it was lower: the counter had gone backwards (the
        backend lost its state: a Redis restart, the SQLite pipeline file deleted) below a
        token the store accepted (`StaleFencingToken.newest`)."""

    # -- timers -----------------------------------------------------------------------------

    async def set_timer(self, key: str, task: Task, *, due_at: float) -> None:
        """Create or replace the timer `key`: at `due_at`, `task` is enqueued."""

    async def set_timer_if_earlier(self, key: str, task: Task, *, due_at: float) -> bool:
        """Set the timer `key` only if it does not exist or is due later than `due_at`; the
        task is replaced only when the due time moves. True if the timer was created or moved
        earlier; a timer is never moved later by this call."""

    async def remove_timer(self, key: str) -> bool:
        """Delete the timer `key`; False if it did not exist."""

    async def get_timer(self, key: str) -> tuple[float, Task] | None:
        """The due time and task of the timer `key`, or None."""

    async def fire_due_timers(self, *, now: float, limit: int) -> list[Task]:
        """Atomically remove up to `limit` timers due at or before `now` and enqueue their tasks
        (enqueue time `now`). Safe with several pumps: each timer fires exactly once."""

    # -- per-session state ------------------------------------------------------------------

    async def state_incr(self, scope: str, field: str, by: int = 1) -> int:
        """Add `by` to the integer counter `field` of `scope`; returns the new value."""

    async def state_set(self, scope: str, field: str, value: str) -> None:
        """Set `field` of `scope` (a cursor, a snapshot) to `value`."""

    async def state_get(self, scope: str) -> dict[str, str]:
        """All fields of `scope` (counters as decimal strings); {} if none."""

    async def state_delete(self, scope: str, fields: list[str]) -> int:
        """Delete `fields` of `scope`; returns how many existed."""

    # -- dead letters -----------------------------------------------------------------------

    async def dead_letter(
        self, delivery: Delivery, error: str, *, now: float
    ) -> DeadLetter | None:
        """Atomically acknowledge `delivery` and record it as dead with `error`. None, and
        nothing done, if the delivery is no longer pending for its consumer (it was reclaimed)."""

    async def list_dead(
        self, *, limit: int, tenant: str | None = None, after: str | None = None
    ) -> list[DeadLetter]:
        """Up to `limit` dead letters of `tenant` (every tenant's when None), oldest first,
        through an index on the tenant. `after`: the id of the last dead letter of the previous
        page (a cursor; `DeadLetterNotFound` if there is no such record of `tenant`).

        Dead-letter ids are random (`new_dead_id`): they do not tell how many failures other
        tenants had. A scheduler that parks keys whose task is dead reads a tenant's dead
        letters this way (each carries its task: type, tenant, session, payload)."""

    async def count_dead(self, *, tenant: str | None = None) -> int:
        """How many dead letters `tenant` (every tenant when None) has."""

    async def requeue_dead(self, dead_id: str, *, now: float, tenant: str | None = None) -> Task:
        """Move a dead letter (of `tenant`, when given) back to the queue with its attempt count
        reset to 0.

        Raises `DeadLetterNotFound` if there is no such record (of that tenant)."""

    async def purge_dead(self, dead_ids: list[str] | None = None) -> int:
        """Delete the named dead letters (all when `dead_ids` is None); returns how many."""

    # -- wake-ups ---------------------------------------------------------------------------

    async def notify_free(self, types: Collection[TaskType]) -> None:
        """Consumers of `types` are free (one started, or finished a task): wake a waiter of
        each of them (`wait_free`), in this process or another."""

    async def wait_free(self, types: Collection[TaskType], *, timeout_s: float) -> bool:
        """Wait until `notify_free` names one of `types`, at most `timeout_s` (a wait may end
        sooner, saying False: the caller waits again if it wants). A notice given since this
        backend's previous wait for those types returns at once, so none is lost between two
        waits. True if notified."""

    # -- lifecycle --------------------------------------------------------------------------

    async def close(self) -> None:
        """Release connections. The backend is unusable afterwards."""


def new_dead_id() -> str:
    return f"dl_{uuid.uuid4().hex[:24]}"


def retry_timer_key(task: Task) -> str:
    return retry_timer_key_for(task.id)


def retry_timer_key_for(task_id: str) -> str:
    """The timer that holds the next attempt of task `task_id` while it waits for its retry."""
    return f"retry/{task_id}"


DELIVERY_LIMIT_ERROR = "delivery limit exceeded (the task's worker went silent every time)"
