"""The distributed backend: Redis Streams consumer group, SET NX PX locks, sorted-set timers.

Keys (all under one prefix, see `RedisKeys`):
- `tasks` stream, consumer group `workers`: XREADGROUP to consume, XACK + XDEL to acknowledge,
  XAUTOCLAIM to reclaim idle deliveries (the delivery count sends poison tasks to `dead`);
- `dead` stream: dead-letter records (task, error, failed_at);
- `lock:<key>` SET NX PX with Lua renew / release (owner-checked); `fence:<key>` INCR counters;
- `timers` sorted set (score = due time) + `timer-data` hash (key -> task); `ZADD … LT` is
  set-if-earlier, a Lua script pops due timers and XADDs their tasks in one step;
- `state:<scope>` hashes for per-session counters and cursors.

Stream entries carry the task JSON in field `task` and the enqueue time in field `at`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError, WatchError

from stratamem.pipeline.backend import DELIVERY_LIMIT_ERROR, retry_timer_key
from stratamem.pipeline.errors import BackendUnavailable, DeadLetterNotFound
from stratamem.pipeline.task import DeadLetter, Delivery, LockGrant, QueueDepth, Task

P = ParamSpec("P")
R = TypeVar("R")

GROUP = "workers"
REQUEUE_ATTEMPTS = 5

ACQUIRE_LUA = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"""

RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

SET_IF_EARLIER_LUA = """
local changed = redis.call('ZADD', KEYS[1], 'LT', 'CH', ARGV[1], ARGV[2])
if changed == 1 then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
end
return changed
"""

# Owner-checked operations on a pending entry: only the consumer it is pending for may ack it or
# reset its idle time (a consumer whose delivery was reclaimed must not steal it back).
OWNED_ACK_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

RELEASE_AND_ACK_LUA = """
if KEYS[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[4] then
  redis.call('DEL', KEYS[2])
end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

OWNED_EXTEND_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
  return 1
end
return 0
"""

POP_DUE_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local fired = {}
for _, key in ipairs(due) do
  local body = redis.call('HGET', KEYS[2], key)
  redis.call('ZREM', KEYS[1], key)
  redis.call('HDEL', KEYS[2], key)
  if body then
    redis.call('XADD', KEYS[3], '*', 'task', body, 'at', ARGV[1])
    table.insert(fired, body)
  end
end
return fired
"""


class RedisKeys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tasks = f"{prefix}tasks"
        self.dead = f"{prefix}dead"
        self.timers = f"{prefix}timers"
        self.timer_data = f"{prefix}timer-data"

    def lock(self, key: str) -> str:
        return f"{self.prefix}lock:{key}"

    def fence(self, key: str) -> str:
        return f"{self.prefix}fence:{key}"

    def state(self, scope: str) -> str:
        return f"{self.prefix}state:{scope}"


def _translated(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except RedisError as exc:
            raise BackendUnavailable(f"Redis pipeline backend failed: {exc}") from exc

    return wrapper


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(raw: dict[Any, Any]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


class RedisBackend:
    """`PipelineBackend` on one Redis server. `prefix` isolates deployments (and tests)."""

    def __init__(self, url: str, *, prefix: str = "stratamem:pipeline:") -> None:
        self._redis = aioredis.Redis.from_url(url, decode_responses=False)
        self.keys = RedisKeys(prefix)
        self._acquire = self._redis.register_script(ACQUIRE_LUA)
        self._renew = self._redis.register_script(RENEW_LUA)
        self._release = self._redis.register_script(RELEASE_LUA)
        self._set_if_earlier = self._redis.register_script(SET_IF_EARLIER_LUA)
        self._pop_due = self._redis.register_script(POP_DUE_LUA)
        self._owned_ack = self._redis.register_script(OWNED_ACK_LUA)
        self._owned_extend = self._redis.register_script(OWNED_EXTEND_LUA)
        self._release_and_ack = self._redis.register_script(RELEASE_AND_ACK_LUA)
        self._group_ready = False

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            await self._redis.xgroup_create(self.keys.tasks, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _delivery(self, entry_id: Any, raw: dict[Any, Any], consumer: str, n: int) -> Delivery:
        fields = _fields(raw)
        return Delivery(
            task=Task.from_json(fields["task"]),
            receipt=_text(entry_id),
            consumer=consumer,
            deliveries=n,
            enqueued_at=float(fields["at"]),
        )

    # -- queue ------------------------------------------------------------------------------

    @_translated
    async def enqueue(self, task: Task, *, now: float) -> None:
        await self._ensure_group()
        await self._redis.xadd(self.keys.tasks, {"task": task.to_json(), "at": repr(now)})

    @_translated
    async def consume(
        self, consumer: str, *, count: int, block_ms: int, now: float
    ) -> list[Delivery]:
        await self._ensure_group()
        reply: Any = await self._redis.xreadgroup(
            GROUP, consumer, {self.keys.tasks: ">"}, count=count, block=block_ms or None
        )
        out: list[Delivery] = []
        for _stream, entries in reply or []:
            out.extend(self._delivery(eid, raw, consumer, 1) for eid, raw in entries if raw)
        return out

    @_translated
    async def ack(self, delivery: Delivery) -> bool:
        args = [GROUP, delivery.receipt, delivery.consumer]
        return int(await self._owned_ack(keys=[self.keys.tasks], args=args)) == 1

    @_translated
    async def release_and_ack(self, delivery: Delivery, grant: LockGrant | None) -> bool:
        lock = "" if grant is None else self.keys.lock(grant.key)
        owner = "" if grant is None else grant.owner
        args = [GROUP, delivery.receipt, delivery.consumer, owner]
        return int(await self._release_and_ack(keys=[self.keys.tasks, lock], args=args)) == 1

    @_translated
    async def extend(self, delivery: Delivery, *, now: float) -> bool:
        args = [GROUP, delivery.receipt, delivery.consumer]
        return int(await self._owned_extend(keys=[self.keys.tasks], args=args)) == 1

    @_translated
    async def reclaim(
        self, consumer: str, *, min_idle_ms: int, count: int, max_deliveries: int, now: float
    ) -> list[Delivery]:
        await self._ensure_group()
        reply: Any = await self._redis.xautoclaim(
            self.keys.tasks, GROUP, consumer, min_idle_ms, "0-0", count=count
        )
        entries = [(eid, raw) for eid, raw in reply[1] if raw]
        if not entries:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:  # one round trip for all
            for eid, _ in entries:
                pipe.xpending_range(self.keys.tasks, GROUP, min=eid, max=eid, count=1)
            infos = await pipe.execute()
        kept: list[Delivery] = []
        for (eid, raw), info in zip(entries, infos, strict=True):
            n = int(info[0]["times_delivered"]) if info else 1
            delivery = self._delivery(eid, raw, consumer, n)
            if n > max_deliveries:
                await self.dead_letter(delivery, DELIVERY_LIMIT_ERROR, now=now)
            else:
                kept.append(delivery)
        return kept

    @_translated
    async def retry(self, delivery: Delivery, task: Task, *, due_at: float) -> None:
        key = retry_timer_key(task)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(self.keys.tasks, GROUP, delivery.receipt)
            pipe.xdel(self.keys.tasks, delivery.receipt)
            pipe.zadd(self.keys.timers, {key: due_at})
            pipe.hset(self.keys.timer_data, key, task.to_json())
            await pipe.execute()

    @_translated
    async def depth(self) -> QueueDepth:
        await self._ensure_group()
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xlen(self.keys.tasks)
            pipe.xpending(self.keys.tasks, GROUP)
            pipe.zcard(self.keys.timers)
            pipe.xlen(self.keys.dead)
            total, pending, timers, dead = await pipe.execute()
        in_flight = int(pending["pending"])
        return QueueDepth(
            ready=int(total) - in_flight, in_flight=in_flight, timers=int(timers), dead=int(dead)
        )

    @_translated
    async def list_tasks(self, *, limit: int) -> list[Task]:
        entries: Any = await self._redis.xrange(self.keys.tasks, count=limit)
        return [Task.from_json(_fields(raw)["task"]) for _, raw in entries]

    # -- locks ------------------------------------------------------------------------------

    @_translated
    async def acquire_lock(
        self, key: str, owner: str, *, ttl_ms: int, now: float
    ) -> LockGrant | None:
        keys = [self.keys.lock(key), self.keys.fence(key)]
        token = int(await self._acquire(keys=keys, args=[owner, ttl_ms]))
        return LockGrant(key=key, owner=owner, token=token) if token else None

    @_translated
    async def renew_lock(self, key: str, owner: str, *, ttl_ms: int, now: float) -> bool:
        return int(await self._renew(keys=[self.keys.lock(key)], args=[owner, ttl_ms])) == 1

    @_translated
    async def release_lock(self, key: str, owner: str) -> bool:
        return int(await self._release(keys=[self.keys.lock(key)], args=[owner])) == 1

    @_translated
    async def fence_token(self, key: str) -> int:
        value = await self._redis.get(self.keys.fence(key))
        return 0 if value is None else int(value)

    # -- timers -----------------------------------------------------------------------------

    @_translated
    async def set_timer(self, key: str, task: Task, *, due_at: float) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zadd(self.keys.timers, {key: due_at})
            pipe.hset(self.keys.timer_data, key, task.to_json())
            await pipe.execute()

    @_translated
    async def set_timer_if_earlier(self, key: str, task: Task, *, due_at: float) -> bool:
        keys = [self.keys.timers, self.keys.timer_data]
        changed = await self._set_if_earlier(keys=keys, args=[repr(due_at), key, task.to_json()])
        return int(changed) == 1

    @_translated
    async def remove_timer(self, key: str) -> bool:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.timers, key)
            pipe.hdel(self.keys.timer_data, key)
            removed, _ = await pipe.execute()
        return int(removed) == 1

    @_translated
    async def get_timer(self, key: str) -> tuple[float, Task] | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zscore(self.keys.timers, key)
            pipe.hget(self.keys.timer_data, key)
            score, body = await pipe.execute()
        if score is None or body is None:
            return None
        return float(score), Task.from_json(body)

    @_translated
    async def fire_due_timers(self, *, now: float, limit: int) -> list[Task]:
        await self._ensure_group()
        keys = [self.keys.timers, self.keys.timer_data, self.keys.tasks]
        fired = await self._pop_due(keys=keys, args=[repr(now), limit])
        return [Task.from_json(body) for body in fired]

    # -- state ------------------------------------------------------------------------------

    @_translated
    async def state_incr(self, scope: str, field: str, by: int = 1) -> int:
        return int(await self._redis.hincrby(self.keys.state(scope), field, by))

    @_translated
    async def state_set(self, scope: str, field: str, value: str) -> None:
        await self._redis.hset(self.keys.state(scope), field, value)

    @_translated
    async def state_get(self, scope: str) -> dict[str, str]:
        return _fields(await self._redis.hgetall(self.keys.state(scope)))

    # -- dead letters -----------------------------------------------------------------------

    @_translated
    async def dead_letter(self, delivery: Delivery, error: str, *, now: float) -> DeadLetter:
        record = {"task": delivery.task.to_json(), "error": error, "failed_at": repr(now)}
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xadd(self.keys.dead, record)  # type: ignore[arg-type]
            pipe.xack(self.keys.tasks, GROUP, delivery.receipt)
            pipe.xdel(self.keys.tasks, delivery.receipt)
            dead_id, _, _ = await pipe.execute()
        return DeadLetter(id=_text(dead_id), task=delivery.task, error=error, failed_at=now)

    @_translated
    async def list_dead(self, *, limit: int) -> list[DeadLetter]:
        entries: Any = await self._redis.xrange(self.keys.dead, count=limit)
        return [_dead(eid, raw) for eid, raw in entries]

    @_translated
    async def requeue_dead(self, dead_id: str, *, now: float) -> Task:
        """WATCH the dead stream, read the record, then delete it and enqueue in one MULTI."""
        await self._ensure_group()
        for _ in range(REQUEUE_ATTEMPTS):
            async with self._redis.pipeline(transaction=True) as pipe:
                await pipe.watch(self.keys.dead)
                entries: Any = await pipe.xrange(self.keys.dead, min=dead_id, max=dead_id)
                if not entries:
                    raise DeadLetterNotFound(f"no dead letter {dead_id!r}")
                old = _dead(*entries[0]).task
                task = Task(old.type, old.tenant, old.session, old.payload, 0, old.id)
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.xdel(self.keys.dead, dead_id)
                pipe.xadd(self.keys.tasks, {"task": task.to_json(), "at": repr(now)})
                try:
                    await pipe.execute()
                except WatchError:
                    continue
                return task
        raise BackendUnavailable(f"dead letters kept changing while requeueing {dead_id!r}")

    @_translated
    async def purge_dead(self, dead_ids: list[str] | None = None) -> int:
        if dead_ids is None:
            count = int(await self._redis.xlen(self.keys.dead))
            await self._redis.delete(self.keys.dead)
            return count
        if not dead_ids:
            return 0
        return int(await self._redis.xdel(self.keys.dead, *dead_ids))

    async def close(self) -> None:
        await self._redis.aclose()

    async def drop_all(self) -> None:
        """Delete every key under the prefix (tests and benchmarks)."""
        async for key in self._redis.scan_iter(match=f"{self.keys.prefix}*", count=500):
            await self._redis.delete(key)


def _dead(entry_id: Any, raw: dict[Any, Any]) -> DeadLetter:
    fields = _fields(raw)
    return DeadLetter(
        id=_text(entry_id),
        task=Task.from_json(fields["task"]),
        error=fields["error"],
        failed_at=float(fields["failed_at"]),
    )
