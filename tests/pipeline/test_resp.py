"""The backend's own RESP codec (`pipeline.resp`) reads what redis-py reads, from a real Redis
speaking either protocol, however the bytes are cut."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stratamem.pipeline import resp

pytestmark = pytest.mark.redis
REDIS = ("127.0.0.1", 6379)


async def _exchange(protocol: int, commands: list[tuple[object, ...]]) -> list[object]:
    reader, writer = await asyncio.open_connection(*REDIS)
    try:
        writer.write(resp.pack([("HELLO", protocol), *commands]))
        replies, in_step = await resp.read_replies(reader, 1 + len(commands), 2.0)
        assert in_step
        return replies[1:]
    finally:
        writer.close()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_replies_read_as_redis_py_reads_them(protocol: int) -> None:
    key = f"test:resp:{uuid.uuid4().hex}"
    stream, script = f"{key}:s", "return {1, false, 'x', {2, 'y'}}"
    commands: list[tuple[object, ...]] = [
        ("SET", key, "v\r\nw"), ("GET", key), ("GET", f"{key}:none"), ("INCR", f"{key}:n"),
        ("XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"),
        ("XADD", stream, "1-1", "task", b"{\"a\": 1}", "at", 1.5),
        ("XREADGROUP", "GROUP", "g", "c", "COUNT", 5, "STREAMS", stream, ">"),
        ("XREADGROUP", "GROUP", "g", "c", "COUNT", 5, "STREAMS", stream, ">"),
        ("EVAL", script, 0), ("HSET", f"{key}:h", "f", 1), ("HGETALL", f"{key}:h"),
        ("DEL", key, f"{key}:n", stream, f"{key}:h"),
    ]  # fmt: skip
    ours = await _exchange(protocol, commands)
    assert ours[:4] == [b"OK", b"v\r\nw", None, 1]
    assert ours[5] == b"1-1" and ours[7] is None and ours[8] == [1, None, b"x", [2, b"y"]]
    assert ours == await _raw_redis_py(protocol, commands)


async def _raw_redis_py(protocol: int, commands: list[tuple[object, ...]]) -> list[object]:
    """The raw replies of redis-py's parser (no response callbacks), as the backend read them."""
    pool = aioredis.ConnectionPool(host=REDIS[0], port=REDIS[1], protocol=protocol)
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        return [await conn.read_response() for _ in commands]
    finally:
        await pool.release(conn)
        await pool.disconnect()


async def test_error_replies_are_the_exceptions_redis_py_raises() -> None:
    got = await _exchange(3, [("EVALSHA", "0" * 40, 0), ("NOTACOMMAND",), ("PING",)])
    assert isinstance(got[0], NoScriptError)
    assert isinstance(got[1], ResponseError) and not isinstance(got[1], NoScriptError)
    assert got[2] == b"PONG"


async def test_replies_cut_anywhere_are_read_whole_and_a_push_is_not_a_reply() -> None:
    data = b":7\r\n>2\r\n$1\r\na\r\n$1\r\nb\r\n*2\r\n%1\r\n$1\r\nk\r\n*0\r\n_\r\n,2.5\r\n"
    for cut in range(1, len(data)):
        reader = asyncio.StreamReader()
        for start in range(0, len(data), cut):
            reader.feed_data(data[start : start + cut])
        replies, in_step = await resp.read_replies(reader, 3, 1.0)
        assert replies == [7, [{b"k": []}, None], 2.5] and in_step


async def test_more_than_the_replies_is_out_of_step_and_a_closed_stream_an_error() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b":1\r\n:2\r\n")
    assert await resp.read_replies(reader, 1, 1.0) == ([1], False)
    reader = asyncio.StreamReader()
    reader.feed_data(b"*2\r\n:1\r\n")
    reader.feed_eof()
    with pytest.raises(RedisConnectionError):
        await resp.read_replies(reader, 1, 1.0)
    with pytest.raises(RedisTimeoutError):
        await resp.read_replies(asyncio.StreamReader(), 1, 0.01)


async def test_the_watchdog_closes_an_exchange_past_its_deadline_and_only_that_one() -> None:
    """A server that accepts and never answers: the watched read ends, and the watchdog says
    it was the deadline; a read that is answered in time is left alone."""
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    watchdog = resp.Watchdog(tick_s=0.01)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        live_reader, live_writer = await asyncio.open_connection(*REDIS)
        watchdog.watch(writer.transport, 0.05)
        watchdog.watch(live_writer.transport, 5.0)
        live_writer.write(resp.pack([("PING",)]))
        assert await resp.read_replies(live_reader, 1, None) == ([b"PONG"], True)
        assert not watchdog.done(live_writer.transport)
        with pytest.raises(RedisConnectionError):
            await resp.read_replies(reader, 1, None)
        assert watchdog.done(writer.transport)
        live_writer.close()
    finally:
        watchdog.close()
        silent.close()
