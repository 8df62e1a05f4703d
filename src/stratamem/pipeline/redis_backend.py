"""The distributed backend: Redis Streams consumer group, SET NX PX locks, sorted-set timers.

Keys (all under one prefix, see `RedisKeys`):
- `tasks:<type>` streams, one per task type (routing: a worker reads only the streams of the
  types it runs), consumer group `workers` on each: XREADGROUP to consume, XACK + XDEL to
  acknowledge, XAUTOCLAIM to reclaim idle deliveries (the delivery count sends poison tasks to
  `dead`); ack, extend, retry and dead letter are Lua scripts checked against the consumer and
  delivery count the entry is pending for;
- dead letters: `dead-letters` hash (random id -> task, error, failed_at), ordered in the
  sorted sets `dead-order` (all) and `dead-by:<tenant>` (one tenant's) by an internal counter
  (`dead-seq`), so a tenant's dead letters are listed and paged without reading others';
- `stamps` hash, `<type>/<entry id>` -> the execution stamp of a pending delivery (JSON
  `Attempt`), set when its execution starts, dropped when the delivery ends;
- `lock:<key>` SET NX PX with Lua renew / release (owner-checked); `fence:<key>` INCR counters,
  raised (never lowered) by a Lua max when the store refused a grant below its recorded token;
- `timers` sorted set (score = due time) + `timer-data` hash (key -> task); `ZADD … LT` is
  set-if-earlier, a Lua script pops due timers and XADDs their tasks in one step (a timer
  whose task is not JSON of a known type is set aside in the `unreadable-timers` hash);
- `state:<scope>` hashes for per-session counters and cursors;
- `wake:<type>` lists of at most one element: a notice that consumers of the type are free
  (`notify_free` pushes it, `wait_free` pops it with BLPOP), kept until a waiter takes it.

Stream entries carry the task JSON in field `task` and the enqueue time in field `at`.

A stalled server is an error within a bounded time, never a wait: every command but the
blocking reads has `COMMAND_TIMEOUT_S` to answer (and is not retried on a timeout; a broken
connection is retried once, on a fresh one), so the API's routes that need Redis answer 503
within about that; the blocking reads (XREADGROUP … BLOCK, BLPOP) block at most `BLOCK_CAP_S`
on a client of their own whose timeout covers that wait.
"""

from __future__ import annotations

import functools
import json
import logging
from collections import deque
from collections.abc import Callable, Collection, Coroutine, Iterable, Sequence
from dataclasses import replace
from typing import Any, ParamSpec, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stratamem.pipeline import resp
from stratamem.pipeline.backend import DELIVERY_LIMIT_ERROR, Types, new_dead_id, retry_timer_key
from stratamem.pipeline.errors import BackendUnavailable, DeadLetterNotFound, DeliveryLost
from stratamem.pipeline.task import (
    DeadLetter,
    Delivery,
    InFlight,
    LockGrant,
    QueueDepth,
    Task,
)
from stratamem.pipeline.task_type import TaskType, registered
from stratamem.store.evidence.receipts import Attempt

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

GROUP = "workers"
COMMAND_TIMEOUT_S = 1.5
"""How long a (non-blocking) command, or a connection, may take before it fails."""
BLOCK_CAP_S = 1.0
"""The longest one blocking read (XREADGROUP … BLOCK of `consume`) waits (its caller waits
again)."""
WAIT_FREE_CAP_S = 1.0
"""The longest one BLPOP of `wait_free` blocks a connection (its caller waits again)."""
BLOCKING_TIMEOUT_S = max(BLOCK_CAP_S, WAIT_FREE_CAP_S) + COMMAND_TIMEOUT_S
"""The timeout of the blocking reads' client: their longest wait and a command's time."""
REQUEUE_ATTEMPTS = 5
ENQUEUER = "<enqueue>"
"""The name of `enqueue`'s own connection (`RedisBackend._exchange`; no consumer's name: a
worker's consumers are `<worker>-<n>`)."""

ACQUIRE_LUA = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
"""

RAISE_FENCE_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
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

# Owner-checked operations on a pending entry: only the hand-over it is pending for (the same
# consumer and the same delivery count; a reclaim counts one more) may ack, extend, stamp, retry
# or dead-letter it, so a consumer whose delivery was reclaimed cannot touch the new owner's
# entry. KEYS[1], KEYS[2] of each: the type's stream, the stamps hash; ARGV[1..5]: group, entry
# id, consumer, delivery count, the entry's field in the stamps hash. Whatever ends the delivery
# drops its execution stamp.
OWNED = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p ~= 1 or p[1][2] ~= ARGV[3] or tonumber(p[1][4]) ~= tonumber(ARGV[4]) then
  return false
end
"""
DONE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[5])
"""

OWNED_ACK_LUA = OWNED + DONE + "return 1"

# KEYS[3]: the lock ('' for none); ARGV[6]: its owner.
RELEASE_AND_ACK_LUA = """
if KEYS[3] ~= '' and redis.call('GET', KEYS[3]) == ARGV[6] then
  redis.call('DEL', KEYS[3])
end
""" + OWNED_ACK_LUA

# Reads, without waiting, up to `count` new entries of the streams KEYS[first..], the first
# streams' first, for `reader` of `group`: {key index, entries} per stream that had some.
READ_STREAMS_LUA = """
local function read_streams(first, group, reader, count)
  local left, out = tonumber(count), {}
  for i = first, #KEYS do
    if left <= 0 then break end
    local got = redis.call('XREADGROUP', 'GROUP', group, reader, 'COUNT', left,
                           'STREAMS', KEYS[i], '>')
    if got then
      local entries = got[1][2]
      left = left - #entries
      table.insert(out, {i, entries})
    end
  end
  return out
end
"""

# KEYS[4..]: the streams to read the next entry from, in order; ARGV[7], ARGV[8]: its reader,
# how many. Returns {acked, {key index, entries} per stream that had some}.
RELEASE_ACK_AND_READ_LUA = READ_STREAMS_LUA + """
if KEYS[3] ~= '' and redis.call('GET', KEYS[3]) == ARGV[6] then
  redis.call('DEL', KEYS[3])
end
local acked = 0
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] and tonumber(p[1][4]) == tonumber(ARGV[4]) then
""" + DONE + """
  acked = 1
end
return {acked, read_streams(4, ARGV[1], ARGV[7], ARGV[8])}
"""

OWNED_EXTEND_LUA = (
    OWNED
    + """
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
"""
)

# ARGV[6]: the execution stamp (JSON); also resets the idle time, as `extend`.
OWNED_STAMP_LUA = (
    OWNED
    + """
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
"""
)

# KEYS[3], KEYS[4]: the lock, its fence counter; ARGV[6..8]: the lock's owner, its TTL (ms), the
# execution stamp (JSON with `"token": 0,` for the grant's token to go in; '' for none). The
# delivery is extended first, even when the lock is held (its worker waits for the lock).
# Returns the grant's token, 0 when the lock is held (false: the delivery is not ours).
OWNED_ACQUIRE_LUA = (
    OWNED
    + """
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
if not redis.call('SET', KEYS[3], ARGV[6], 'NX', 'PX', ARGV[7]) then
  return 0
end
local token = redis.call('INCR', KEYS[4])
if ARGV[8] ~= '' then
  local stamp = string.gsub(ARGV[8], '"token": 0,', '"token": ' .. token .. ',', 1)
  redis.call('HSET', KEYS[2], ARGV[5], stamp)
end
return token
"""
)

# KEYS[3], KEYS[4]: timers, timer data; ARGV[6..8]: timer key, due time, task.
OWNED_RETRY_LUA = (
    OWNED
    + DONE
    + """
redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
redis.call('HSET', KEYS[4], ARGV[6], ARGV[8])
return 1
"""
)

# KEYS[3..6]: dead-letter records, their order, the tenant's order, the order counter;
# ARGV[6], ARGV[7]: the dead letter's (random) id and record. Returns the id.
OWNED_DEAD_LUA = (
    OWNED
    + DONE
    + """
local seq = redis.call('INCR', KEYS[6])
redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
redis.call('ZADD', KEYS[4], seq, ARGV[6])
redis.call('ZADD', KEYS[5], seq, ARGV[6])
return ARGV[6]
"""
)

# KEYS: the streams of the wanted types, in order; ARGV: group, consumer, count.
READ_NOW_LUA = READ_STREAMS_LUA + "return read_streams(1, ARGV[1], ARGV[2], ARGV[3])"

# ARGV[3]: the prefix of the per-type task streams (the type is read from the task itself).
POP_DUE_LUA = """
local known = {}
for i = 4, #ARGV do known[ARGV[i]] = true end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local fired, aside = {}, {}
for _, key in ipairs(due) do
  local body = redis.call('HGET', KEYS[2], key)
  redis.call('ZREM', KEYS[1], key)
  redis.call('HDEL', KEYS[2], key)
  if body then
    local ok, task = pcall(cjson.decode, body)
    local kind = ok and type(task) == 'table' and task['type']
    if type(kind) == 'string' and known[kind] then
      redis.call('XADD', ARGV[3] .. kind, '*', 'task', body, 'at', ARGV[1])
      table.insert(fired, body)
    else
      redis.call('HSET', KEYS[3], key, body)
      table.insert(aside, key)
    end
  end
end
return {fired, aside}
"""


class RedisKeys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.tasks_prefix = f"{prefix}tasks:"
        self.dead = f"{prefix}dead-letters"
        self.dead_order = f"{prefix}dead-order"
        self.dead_seq = f"{prefix}dead-seq"
        self.timers = f"{prefix}timers"
        self.timer_data = f"{prefix}timer-data"
        self.unreadable_timers = f"{prefix}unreadable-timers"
        self.stamps = f"{prefix}stamps"

    def tasks(self, task_type: TaskType) -> str:
        """The stream of one task type (consumers read the streams of the types they run)."""
        return f"{self.tasks_prefix}{task_type.name}"

    def dead_of(self, tenant: str) -> str:
        """The order of one tenant's dead letters (ids scored by their global order)."""
        return f"{self.prefix}dead-by:{tenant}"

    def lock(self, key: str) -> str:
        return f"{self.prefix}lock:{key}"

    def fence(self, key: str) -> str:
        return f"{self.prefix}fence:{key}"

    def state(self, scope: str) -> str:
        return f"{self.prefix}state:{scope}"

    def wake(self, task_type: TaskType) -> str:
        return f"{self.prefix}wake:{task_type.name}"


def _translated(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except RedisError as exc:
            if args and isinstance(exc, ResponseError) and isinstance(args[0], RedisBackend):
                args[0]._forget_group_if_gone(exc)
            raise BackendUnavailable(f"Redis pipeline backend failed: {exc}") from exc

    return wrapper


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(raw: dict[Any, Any]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


class RedisBackend:
    """`PipelineBackend` on one Redis server. `prefix` isolates deployments (and tests)."""

    def __init__(self, url: str, *, prefix: str = "stratamem:pipeline:") -> None:
        self._redis = _client(url, COMMAND_TIMEOUT_S)
        self._blocking = _client(url, BLOCKING_TIMEOUT_S)
        self.keys = RedisKeys(prefix)
        self._acquire = self._redis.register_script(ACQUIRE_LUA)
        self._renew = self._redis.register_script(RENEW_LUA)
        self._raise_fence = self._redis.register_script(RAISE_FENCE_LUA)
        self._release = self._redis.register_script(RELEASE_LUA)
        self._set_if_earlier = self._redis.register_script(SET_IF_EARLIER_LUA)
        self._pop_due = self._redis.register_script(POP_DUE_LUA)
        self._read_now = self._redis.register_script(READ_NOW_LUA)
        self._owned_ack = self._redis.register_script(OWNED_ACK_LUA)
        self._owned_extend = self._redis.register_script(OWNED_EXTEND_LUA)
        self._owned_stamp = self._redis.register_script(OWNED_STAMP_LUA)
        self._owned_acquire = self._redis.register_script(OWNED_ACQUIRE_LUA)
        self._owned_retry = self._redis.register_script(OWNED_RETRY_LUA)
        self._owned_dead = self._redis.register_script(OWNED_DEAD_LUA)
        self._release_and_ack = self._redis.register_script(RELEASE_AND_ACK_LUA)
        self._release_ack_and_read = self._redis.register_script(RELEASE_ACK_AND_READ_LUA)
        self._groups: set[TaskType] = set()
        # Entries one blocking read over several streams returned beyond `count`: they are
        # pending for their consumer already, and handed to it first at its next `consume`.
        self._extra: dict[str, deque[Delivery]] = {}
        # Each consumer's own connection (`_exchange`), and the consumers using theirs now.
        self._own: dict[str, Any] = {}
        self._own_busy: set[str] = set()
        self._watchdog = resp.Watchdog()  # the bound of their exchanges

    async def _ensure_groups(self, types: Iterable[TaskType]) -> None:
        for task_type in types:
            if task_type in self._groups:
                continue
            try:
                await self._redis.xgroup_create(self.keys.tasks(task_type), GROUP, id="0",
                                                mkstream=True)  # fmt: skip
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._groups.add(task_type)

    def _forget_group_if_gone(self, exc: ResponseError) -> None:
        """The stream and its group were deleted (Redis restarted without persistence, the
        queue wiped): make the group again on the next call instead of failing forever."""
        if "NOGROUP" in str(exc):
            self._groups.clear()

    def _delivery(self, entry_id: Any, raw: dict[Any, Any], consumer: str, n: int) -> Delivery:
        fields = _fields(raw)
        return Delivery(
            task=Task.from_json(fields["task"]),
            receipt=_text(entry_id),
            consumer=consumer,
            deliveries=n,
            enqueued_at=float(fields["at"]),
        )

    def _script_deliveries(self, reply: Any, consumer: str) -> list[Delivery]:
        """The deliveries of a script's reads: {key index, entries} per stream read."""
        return [self._delivery(eid, raw, consumer, 1)
                for _index, entries in reply or []
                for eid, raw in _with_fields(entries)]  # fmt: skip

    def _owned_args(self, delivery: Delivery) -> tuple[list[str], list[Any]]:
        keys = [self.keys.tasks(delivery.task.type), self.keys.stamps]
        field = _stamp_field(delivery.task.type, delivery.receipt)
        return keys, [GROUP, delivery.receipt, delivery.consumer, delivery.deliveries, field]

    # -- queue ------------------------------------------------------------------------------

    @_translated
    async def enqueue(self, task: Task, *, now: float) -> None:
        await self._ensure_groups([task.type])
        stream, body = self.keys.tasks(task.type), task.to_json()
        reply = await self._on_own(ENQUEUER, ("XADD", stream, "*", "task", body, "at", repr(now)))
        if reply is None:  # another enqueue has that connection now
            await self._redis.xadd(stream, {"task": body, "at": repr(now)})
        elif isinstance(reply[0], Exception):
            raise reply[0]

    @_translated
    async def consume(
        self, consumer: str, *, count: int, block_ms: int, now: float, types: Types = None
    ) -> list[Delivery]:
        wanted = _types(types)
        await self._ensure_groups(wanted)
        out = self._take_extra(consumer, count)
        try:
            if len(wanted) == 1 and block_ms and not out:  # a ready entry answers at once
                return await self._read(consumer, wanted, count, block_ms)
            if len(out) < count and wanted:  # oldest first within each type, without waiting
                out += await self._read_ready(consumer, wanted, count - len(out))
            if out or not block_ms or not wanted:
                return out
            got = await self._read(consumer, wanted, 1, block_ms)
        except ResponseError as exc:  # the stream and its group were deleted meanwhile
            if "NOGROUP" in str(exc):
                self._groups.clear()
            raise
        self._extra.setdefault(consumer, deque()).extend(got[count:])
        return got[:count]

    def _take_extra(self, consumer: str, count: int) -> list[Delivery]:
        extra = self._extra.get(consumer)
        out: list[Delivery] = []
        while extra and len(out) < count:
            out.append(extra.popleft())
        return out

    async def _read_ready(
        self, consumer: str, types: Sequence[TaskType], count: int
    ) -> list[Delivery]:
        """Up to `count` ready entries of `types`, the first types' first, in one round trip."""
        keys = [self.keys.tasks(t) for t in types]
        reply: Any = await self._read_now(keys=keys, args=[GROUP, consumer, count])
        return self._script_deliveries(reply, consumer)

    async def _read(
        self, consumer: str, types: Sequence[TaskType], count: int, block_ms: int | None
    ) -> list[Delivery]:
        streams = {self.keys.tasks(t): ">" for t in types}
        if block_ms:
            block = min(block_ms, int(BLOCK_CAP_S * 1000))
            reply: Any = await self._blocking.xreadgroup(
                GROUP, consumer, streams, count=count, block=block  # type: ignore[arg-type]
            )
        else:
            reply = await self._redis.xreadgroup(GROUP, consumer, streams,  # type: ignore[arg-type]
                                                 count=count)  # fmt: skip
        out: list[Delivery] = []
        for _stream, entries in reply or []:
            out.extend(self._delivery(eid, raw, consumer, 1) for eid, raw in entries if raw)
        return out

    @_translated
    async def ack(self, delivery: Delivery) -> bool:
        keys, args = self._owned_args(delivery)
        return bool(await self._owned_ack(keys=keys, args=args) == 1)

    def _release_args(
        self, delivery: Delivery, grant: LockGrant | None
    ) -> tuple[list[str], list[Any]]:
        """The release-and-ack script's keys and arguments: the owned entry's, then the lock's."""
        keys, args = self._owned_args(delivery)
        keys.append("" if grant is None else self.keys.lock(grant.key))
        args.append("" if grant is None else grant.owner)
        return keys, args

    @_translated
    async def release_and_ack(self, delivery: Delivery, grant: LockGrant | None) -> bool:
        keys, args = self._release_args(delivery, grant)
        return bool(await self._release_and_ack(keys=keys, args=args) == 1)

    @_translated
    async def release_ack_and_consume(
        self, delivery: Delivery, grant: LockGrant | None, *, consumer: str, now: float,
        types: Types = None, block_ms: int = 0,
    ) -> tuple[bool, list[Delivery]]:
        wanted = _types(types)
        await self._ensure_groups(wanted)
        keys, args = self._release_args(delivery, grant)
        extra = self._take_extra(consumer, 1)
        if extra:  # taken already by a read over several streams: handed over first
            return int(await self._release_and_ack(keys=keys, args=args)) == 1, extra
        if block_ms and len(wanted) == 1:
            return await self._release_ack_and_wait(keys, args, consumer, wanted[0], block_ms)
        keys += [self.keys.tasks(t) for t in wanted]
        acked, reply = await self._release_ack_and_read(keys=keys, args=[*args, consumer, 1])
        got = self._script_deliveries(reply, consumer)
        if got or not block_ms or not wanted:
            return int(acked) == 1, got
        got = await self._read(consumer, wanted, 1, block_ms)  # several types: as `consume`
        self._extra.setdefault(consumer, deque()).extend(got[1:])
        return int(acked) == 1, got[:1]

    async def _release_ack_and_wait(
        self, keys: list[str], args: list[Any], consumer: str, task_type: TaskType, block_ms: int
    ) -> tuple[bool, list[Delivery]]:
        """The release-and-ack script and a blocking read of one type's stream, written at
        once on one blocking connection: one round trip whether a task is ready or comes later
        (the script runs before the read waits). On the connection itself, not a redis-py
        pipeline (a third of this call's CPU); a connection that failed midway is dropped."""
        block = min(block_ms, int(BLOCK_CAP_S * 1000))
        script = self._release_and_ack
        stream = self.keys.tasks(task_type)
        commands = [
            ("EVALSHA", script.sha, len(keys), *keys, *args),
            ("XREADGROUP", "GROUP", GROUP, consumer, "COUNT", 1, "BLOCK", block,
             "STREAMS", stream, ">"),
        ]  # fmt: skip
        replies = await self._exchange(consumer, commands, timeout_s=BLOCKING_TIMEOUT_S)
        if replies is None:  # its connection is in use: one of the blocking pool's
            replies = await _exchange_on_pool(self._blocking, commands)
        acked, reply = replies
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, NoScriptError):  # a restarted server: load it, ack again
            acked = await script(keys=keys, args=args)
        elif isinstance(acked, Exception):
            raise acked
        got = [self._delivery(eid, raw, consumer, 1) for eid, raw in _read_entries(reply)]
        return int(acked) == 1, got

    async def _exchange(
        self, consumer: str, commands: list[tuple[Any, ...]], *, timeout_s: float
    ) -> list[Any] | None:
        """Send `commands` at once on `consumer`'s own connection and read their replies (an
        error reply as its exception), all within `timeout_s` (also the write's and the
        connect's socket timeout: a reply late is the client's `TimeoutError`). Its own, made
        on first use, so a task's round trips skip the pool's get and release and the client's
        command path (about a tenth of a task's CPU), packed and parsed by `resp` (another
        sixth); None when that connection is in use (a consumer name several coroutines share,
        as the reclaimer's): the caller goes through a pool. A connection that failed midway,
        or read past the replies, is dropped (the next exchange connects again)."""
        if consumer in self._own_busy:
            return None
        conn = self._own.get(consumer)
        if conn is None:
            pool = self._blocking.connection_pool
            conn = self._own[consumer] = pool.make_connection()  # type: ignore[no-untyped-call]
        self._own_busy.add(consumer)
        conn.socket_timeout = timeout_s
        try:
            await conn.send_packed_command([resp.pack(commands)])
            transport = conn._writer.transport
            self._watchdog.watch(transport, timeout_s)
            try:
                replies, in_step = await resp.read_replies(conn._reader, len(commands), None)
            except RedisConnectionError as exc:
                if self._watchdog.done(transport):
                    raise RedisTimeoutError(f"no reply from Redis within {timeout_s} s") from exc
                raise
            finally:
                self._watchdog.done(transport)
            if not in_step:
                await conn.disconnect(nowait=True)
            return replies
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        finally:
            self._own_busy.discard(consumer)

    async def _on_own(self, name: str, command: tuple[Any, ...]) -> list[Any] | None:
        """`command` on `name`'s own connection (`_exchange`), with the client's rules:
        `COMMAND_TIMEOUT_S` for the reply, a broken connection retried once (on a fresh one);
        None when that connection is in use."""
        try:
            return await self._exchange(name, [command], timeout_s=COMMAND_TIMEOUT_S)
        except RedisConnectionError:
            return await self._exchange(name, [command], timeout_s=COMMAND_TIMEOUT_S)

    async def _run_script(
        self, consumer: str, script: Any, keys: list[str], args: list[Any]
    ) -> Any:
        """EVALSHA of `script` on `consumer`'s own connection (`_on_own`); through the client
        when that connection is in use or the server does not have the script (a restarted
        server: the client loads it)."""
        replies = await self._on_own(consumer, ("EVALSHA", script.sha, len(keys), *keys, *args))
        reply = None if replies is None else replies[0]
        if replies is None or isinstance(reply, NoScriptError):
            return await script(keys=keys, args=args)
        if isinstance(reply, Exception):
            raise reply
        return reply

    @_translated
    async def extend(self, delivery: Delivery, *, now: float) -> bool:
        keys, args = self._owned_args(delivery)
        return bool(await self._owned_extend(keys=keys, args=args) == 1)

    @_translated
    async def stamp(self, delivery: Delivery, attempt: Attempt, *, now: float) -> bool:
        keys, args = self._owned_args(delivery)
        args.append(json.dumps(attempt.to_json()))
        return bool(await self._owned_stamp(keys=keys, args=args) == 1)

    @_translated
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
        wanted = _types(types)
        await self._ensure_groups(wanted)
        kept: list[Delivery] = []
        for task_type in wanted:
            if len(kept) < count:
                got = await self._reclaim_from(task_type, consumer, min_idle_ms, count - len(kept))
                for delivery in got:
                    if delivery.deliveries > max_deliveries:
                        await self.dead_letter(delivery, DELIVERY_LIMIT_ERROR, now=now)
                    else:
                        kept.append(delivery)
        return kept

    async def _reclaim_from(
        self, task_type: TaskType, consumer: str, min_idle_ms: int, count: int
    ) -> list[Delivery]:
        stream = self.keys.tasks(task_type)
        reply: Any = await self._redis.xautoclaim(
            stream, GROUP, consumer, min_idle_ms, "0-0", count=count
        )
        entries = [(eid, raw) for eid, raw in reply[1] if raw]
        if not entries:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:  # one round trip for all
            for eid, _ in entries:
                pipe.xpending_range(stream, GROUP, min=eid, max=eid, count=1)
            infos = await pipe.execute()
        stamps = await self._stamps(task_type, [_text(eid) for eid, _ in entries])
        return [
            replace(
                self._delivery(eid, raw, consumer, int(info[0]["times_delivered"]) if info else 1),
                stamp=stamp,
            )
            for (eid, raw), info, stamp in zip(entries, infos, stamps, strict=True)
        ]

    async def _stamps(self, task_type: TaskType, entry_ids: list[str]) -> list[Attempt | None]:
        if not entry_ids:
            return []
        fields = [_stamp_field(task_type, eid) for eid in entry_ids]
        raw: list[Any] = await self._redis.hmget(self.keys.stamps, fields)
        return [None if r is None else Attempt.from_json(json.loads(r)) for r in raw]

    @_translated
    async def in_flight(self, *, limit: int, now: float) -> list[InFlight]:
        found: list[tuple[tuple[int, int], InFlight]] = []
        for task_type in registered():
            found += await self._in_flight_of(task_type, limit)
        return [item for _, item in sorted(found, key=lambda f: f[0])[:limit]]

    async def _in_flight_of(
        self, task_type: TaskType, limit: int
    ) -> list[tuple[tuple[int, int], InFlight]]:
        stream = self.keys.tasks(task_type)
        try:  # read only: a stream or group nobody made yet holds nothing in flight
            pending: Any = await self._redis.xpending_range(stream, GROUP, "-", "+", limit)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            return []
        if not pending:
            return []
        ids = [_text(p["message_id"]) for p in pending]
        async with self._redis.pipeline(transaction=False) as pipe:
            for eid in ids:
                pipe.xrange(stream, min=eid, max=eid, count=1)
            bodies = await pipe.execute()
        stamps = await self._stamps(task_type, ids)
        out = []
        for info, body, stamp in zip(pending, bodies, stamps, strict=True):
            if not body:
                continue  # deleted under its consumer (a wiped stream)
            eid, raw = body[0]
            delivery = self._delivery(eid, raw, _text(info["consumer"]),
                                      int(info["times_delivered"]))  # fmt: skip
            idle_s = int(info["time_since_delivered"]) / 1000
            out.append((_entry_order(eid), InFlight(replace(delivery, stamp=stamp), idle_s)))
        return out

    @_translated
    async def retry(self, delivery: Delivery, task: Task, *, due_at: float) -> bool:
        keys, args = self._owned_args(delivery)
        keys += [self.keys.timers, self.keys.timer_data]
        args += [retry_timer_key(task), repr(due_at), task.to_json()]
        return bool(await self._owned_retry(keys=keys, args=args) == 1)

    @_translated
    async def depth(self) -> QueueDepth:
        await self._ensure_groups(registered())
        async with self._redis.pipeline(transaction=False) as pipe:
            for task_type in registered():
                pipe.xlen(self.keys.tasks(task_type))
                pipe.xpending(self.keys.tasks(task_type), GROUP)
            pipe.zcard(self.keys.timers)
            pipe.hlen(self.keys.dead)
            *per_type, timers, dead = await pipe.execute()
        total = sum(int(n) for n in per_type[0::2])
        in_flight = sum(int(p["pending"]) for p in per_type[1::2])
        queued = {t: int(n) for t, n in zip(registered(), per_type[0::2], strict=True)}
        return QueueDepth(ready=total - in_flight, in_flight=in_flight, timers=int(timers),
                          dead=int(dead), queued=queued)  # fmt: skip

    @_translated
    async def list_tasks(self, *, limit: int) -> list[Task]:
        found: list[tuple[tuple[int, int], Task]] = []
        for task_type in registered():
            entries: Any = await self._redis.xrange(self.keys.tasks(task_type), count=limit)
            found += [(_entry_order(eid), Task.from_json(_fields(raw)["task"]))
                      for eid, raw in entries]  # fmt: skip
        return [task for _, task in sorted(found, key=lambda f: f[0])[:limit]]

    # -- locks ------------------------------------------------------------------------------

    @_translated
    async def acquire_lock(
        self, key: str, owner: str, *, ttl_ms: int, now: float
    ) -> LockGrant | None:
        keys = [self.keys.lock(key), self.keys.fence(key)]
        token = int(await self._acquire(keys=keys, args=[owner, ttl_ms]))
        return LockGrant(key=key, owner=owner, token=token) if token else None

    @_translated
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
        keys, args = self._owned_args(delivery)
        keys += [self.keys.lock(key), self.keys.fence(key)]
        body = "" if stamp is None else json.dumps(replace(stamp, token=0).to_json())
        args += [owner, ttl_ms, body]
        token = await self._run_script(delivery.consumer, self._owned_acquire, keys, args)
        if token is None:
            raise DeliveryLost(f"delivery {delivery.receipt} is no longer {delivery.consumer}'s")
        return LockGrant(key=key, owner=owner, token=int(token)) if int(token) else None

    @_translated
    async def renew_lock(self, key: str, owner: str, *, ttl_ms: int, now: float) -> bool:
        return int(await self._renew(keys=[self.keys.lock(key)], args=[owner, ttl_ms])) == 1

    @_translated
    async def renew_locks(
        self, keys: Sequence[str], owner: str, *, ttl_ms: int, now: float
    ) -> set[str]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                await self._renew(keys=[self.keys.lock(key)], args=[owner, ttl_ms], client=pipe)
            replies = await pipe.execute()
        return {key for key, reply in zip(keys, replies, strict=True) if int(reply) == 1}

    @_translated
    async def release_lock(self, key: str, owner: str) -> bool:
        return int(await self._release(keys=[self.keys.lock(key)], args=[owner])) == 1

    @_translated
    async def fence_token(self, key: str) -> int:
        value = await self._redis.get(self.keys.fence(key))
        return 0 if value is None else int(value)

    @_translated
    async def raise_fence(self, key: str, token: int) -> bool:
        return int(await self._raise_fence(keys=[self.keys.fence(key)], args=[token])) == 1

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
        await self._ensure_groups(registered())
        keys = [self.keys.timers, self.keys.timer_data]
        keys.append(self.keys.unreadable_timers)
        args: list[str | int] = [repr(now), limit, self.keys.tasks_prefix, *registered().names()]
        fired, aside = await self._pop_due(keys=keys, args=args)
        for key in aside:
            log.error("timer %r has a task that cannot be read: set aside in %s", _text(key),
                      self.keys.unreadable_timers)  # fmt: skip
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

    @_translated
    async def state_delete(self, scope: str, fields: list[str]) -> int:
        if not fields:
            return 0
        return int(await self._redis.hdel(self.keys.state(scope), *fields))

    # -- wake-ups ---------------------------------------------------------------------------

    @_translated
    async def notify_free(self, types: Collection[TaskType]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for task_type in types:
                pipe.lpush(self.keys.wake(task_type), 1)
                pipe.ltrim(self.keys.wake(task_type), 0, 0)
            await pipe.execute()

    @_translated
    async def wait_free(self, types: Collection[TaskType], *, timeout_s: float) -> bool:
        if not types:
            return False
        timeout = min(max(timeout_s, 0.01), WAIT_FREE_CAP_S)
        keys = [self.keys.wake(t) for t in sorted(types)]
        return await self._blocking.blpop(keys, timeout=timeout) is not None

    # -- dead letters -----------------------------------------------------------------------

    @_translated
    async def dead_letter(
        self, delivery: Delivery, error: str, *, now: float
    ) -> DeadLetter | None:
        keys, args = self._owned_args(delivery)
        keys += [self.keys.dead, self.keys.dead_order, self.keys.dead_of(delivery.task.tenant),
                 self.keys.dead_seq]  # fmt: skip
        record = {"task": delivery.task.to_json(), "error": error, "failed_at": now}
        args += [new_dead_id(), json.dumps(record)]
        dead_id = await self._owned_dead(keys=keys, args=args)
        if dead_id is None:
            return None
        return DeadLetter(id=_text(dead_id), task=delivery.task, error=error, failed_at=now)

    @_translated
    async def list_dead(
        self, *, limit: int, tenant: str | None = None, after: str | None = None
    ) -> list[DeadLetter]:
        order = self.keys.dead_order if tenant is None else self.keys.dead_of(tenant)
        low: str = "-inf"
        if after is not None:
            score = await self._redis.zscore(order, after)
            if score is None:
                raise DeadLetterNotFound(f"no dead letter {after!r} to page after")
            low = f"({score}"
        ids: list[Any] = await self._redis.zrangebyscore(order, low, "+inf", start=0, num=limit)
        if not ids:
            return []
        records: list[Any] = await self._redis.hmget(self.keys.dead, ids)
        return [_dead(i, r) for i, r in zip(ids, records, strict=True) if r is not None]

    @_translated
    async def count_dead(self, *, tenant: str | None = None) -> int:
        order = self.keys.dead_order if tenant is None else self.keys.dead_of(tenant)
        return int(await self._redis.zcard(order))

    @_translated
    async def requeue_dead(self, dead_id: str, *, now: float, tenant: str | None = None) -> Task:
        """WATCH the record, read it, then delete it and enqueue its task in one MULTI."""
        for _ in range(REQUEUE_ATTEMPTS):
            async with self._redis.pipeline(transaction=True) as pipe:
                await pipe.watch(self.keys.dead)
                raw: Any = await pipe.hget(self.keys.dead, dead_id)
                old = None if raw is None else _dead(dead_id, raw).task
                if old is None or tenant not in (None, old.tenant):
                    raise DeadLetterNotFound(f"no dead letter {dead_id!r}")
                task = Task(old.type, old.tenant, old.session, old.payload, 0, old.id)
                await self._ensure_groups([task.type])
                pipe.multi()  # type: ignore[no-untyped-call]
                self._forget_dead(pipe, dead_id, task.tenant)
                pipe.xadd(self.keys.tasks(task.type), {"task": task.to_json(), "at": repr(now)})
                try:
                    await pipe.execute()
                except WatchError:
                    continue
                return task
        raise BackendUnavailable(f"dead letters kept changing while requeueing {dead_id!r}")

    def _forget_dead(self, pipe: Any, dead_id: str, tenant: str) -> None:
        pipe.hdel(self.keys.dead, dead_id)
        pipe.zrem(self.keys.dead_order, dead_id)
        pipe.zrem(self.keys.dead_of(tenant), dead_id)

    @_translated
    async def purge_dead(self, dead_ids: list[str] | None = None) -> int:
        if dead_ids is None:
            count = int(await self._redis.hlen(self.keys.dead))
            await self._redis.delete(self.keys.dead, self.keys.dead_order)
            async for key in self._redis.scan_iter(match=self.keys.dead_of("*"), count=500):
                await self._redis.delete(key)
            return count
        records: list[Any] = await self._redis.hmget(self.keys.dead, dead_ids) if dead_ids else []
        found = [(d, _dead(d, r).task.tenant) for d, r in zip(dead_ids, records, strict=True) if r]
        async with self._redis.pipeline(transaction=True) as pipe:
            for dead_id, tenant in found:
                self._forget_dead(pipe, dead_id, tenant)
            await pipe.execute()
        return len(found)

    async def close(self) -> None:
        for conn in self._own.values():
            await conn.disconnect()
        self._own.clear()
        self._watchdog.close()
        await self._redis.aclose()
        await self._blocking.aclose()

    async def drop_all(self) -> None:
        """Delete every key under the prefix (tests and benchmarks)."""
        async for key in self._redis.scan_iter(match=f"{self.keys.prefix}*", count=500):
            await self._redis.delete(key)


def _client(url: str, timeout_s: float) -> aioredis.Redis:
    """A client whose commands fail after `timeout_s` (a stalled server), retried only when
    the connection broke (once, on a fresh connection: a restarted server), not on a timeout:
    the library's default (10 retries with backoff, 5 s timeouts) made a stalled server a
    wait of 15-25 s for every caller."""
    retry = Retry(ExponentialBackoff(cap=0.1, base=0.01), 1,
                  supported_errors=(RedisConnectionError,))  # fmt: skip
    client = aioredis.Redis.from_url(
        url, decode_responses=False, socket_timeout=timeout_s,
        socket_connect_timeout=COMMAND_TIMEOUT_S, retry=retry,
    )  # fmt: skip
    pool = client.connection_pool
    pool.connection_class = _untimed_writes(pool.connection_class)
    return client


class _UntimedWrite:
    """A write that cannot wait goes out without a timer: with a `socket_timeout`, the library
    wraps every write in `asyncio.wait_for`, a task of its own for each command (about half of
    a command's CPU in this process, 185 -> 80 us an EVALSHA). When nothing is queued on the
    connection, the write is handed to the socket at once and cannot block, so it needs no
    timeout; otherwise (a server that stopped reading) the timed write waits, as before. The
    reply's read keeps its timeout either way, so a stalled server is still an error within
    `socket_timeout`."""

    _writer: Any
    health_check_interval: int
    is_connected: bool

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = self._writer
        if (isinstance(command, list) and self.is_connected and not self.health_check_interval
                and not writer.transport.is_closing()
                and writer.transport.get_write_buffer_size() == 0):  # fmt: skip
            writer.writelines(command)
            return
        await super().send_packed_command(command, check_health)  # type: ignore[misc]


_UNTIMED: dict[type, type] = {}


def _untimed_writes(connection_class: type) -> type:
    """`connection_class` (TCP, TLS or Unix socket, as the URL says) with `_UntimedWrite`."""
    if connection_class not in _UNTIMED:
        name = f"Untimed{connection_class.__name__}"
        _UNTIMED[connection_class] = type(name, (_UntimedWrite, connection_class), {})
    return _UNTIMED[connection_class]


async def _reply(conn: Any) -> Any:
    """The next reply on `conn` (within its socket timeout: an explicit timeout would answer
    None, not an error, when it passed), an error reply as its exception (the replies after it
    are still to be read)."""
    try:
        return await conn.read_response()
    except ResponseError as exc:
        return exc


async def _exchange_on_pool(client: aioredis.Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
    """`RedisBackend._exchange` on a connection of `client`'s pool."""
    pool = client.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        return [await _reply(conn) for _ in commands]
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    finally:
        await pool.release(conn)


def _read_entries(reply: Any) -> list[tuple[Any, dict[Any, Any]]]:
    """The (entry id, fields) of a raw XREADGROUP reply: a map of streams (RESP3) or a list of
    pairs (RESP2), None when the wait timed out; entries deleted meanwhile left out."""
    streams = reply.items() if isinstance(reply, dict) else reply or []
    return [entry for _stream, entries in streams for entry in _with_fields(entries)]


def _with_fields(entries: Any) -> list[tuple[Any, dict[Any, Any]]]:
    """(entry id, fields) of raw stream entries, each a flat list of names and values; entries
    deleted meanwhile (no fields) left out."""
    return [(eid, dict(zip(flat[0::2], flat[1::2], strict=True))) for eid, flat in entries if flat]


def _stamp_field(task_type: TaskType, entry_id: str) -> str:
    return f"{task_type.name}/{entry_id}"


def _types(types: Types) -> list[TaskType]:
    return list(registered()) if types is None else sorted(set(types))


def _entry_order(entry_id: Any) -> tuple[int, int]:
    millis, _, seq = _text(entry_id).partition("-")
    return int(millis), int(seq or 0)


def _dead(dead_id: Any, raw: Any) -> DeadLetter:
    record = json.loads(raw)
    return DeadLetter(
        id=_text(dead_id),
        task=Task.from_json(record["task"]),
        error=str(record["error"]),
        failed_at=float(record["failed_at"]),
    )
