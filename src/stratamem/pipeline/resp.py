"""A small RESP codec for the Redis backend's hot exchanges (a task's lock, its ack and next read).

redis-py packs a command through its encoder and reads a reply line by line through its parser,
an await for each line: for a task's two exchanges that was about a sixth of the process's CPU
(py-spy of `bench/pipeline.py`). Here a batch of commands is packed in one join, and the replies
are parsed from whatever bytes the socket has, read in chunks. Both protocol versions' reply
types are read (RESP2, and RESP3 as redis-py's connections speak it), as redis-py returns them
with `decode_responses=False`: bulk and simple strings as bytes, maps as dicts, nulls as None;
an error reply is the exception redis-py would raise for it (`NoScriptError`, `ResponseError`
…), returned in its place; a push message (RESP3 `>`) is not a reply and is skipped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

CRLF = b"\r\n"
READ_CHUNK = 65536


class _Incomplete(Exception):
    """The buffer ends before the reply does: read more."""


def _arg(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        raise TypeError("a bool is not a Redis argument")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()
    raise TypeError(f"not a Redis argument: {type(value).__name__}")


def pack(commands: Sequence[Sequence[Any]]) -> bytes:
    """The RESP request of `commands` (each a name and its arguments: bytes, str, int, float)."""
    out = bytearray()
    for command in commands:
        out += b"*%d\r\n" % len(command)
        for value in command:
            data = value.encode() if type(value) is str else _arg(value)
            out += b"$%d\r\n%b\r\n" % (len(data), data)
    return bytes(out)


class _Push:
    """A RESP3 push message: not the reply to a command."""


_PUSH = _Push()


def _line(buf: bytes, pos: int) -> tuple[bytes, int]:
    end = buf.find(CRLF, pos)
    if end < 0:
        raise _Incomplete
    return buf[pos:end], end + 2


def _error(text: bytes) -> Exception:
    """The exception redis-py raises for the error reply `text`."""
    found: Exception = BaseParser.parse_error(text.decode(errors="replace"))  # type: ignore[no-untyped-call]
    return found


def _null(_line: bytes) -> None:
    return None


def _boolean(line: bytes) -> bool:
    return line == b"t"


#: The replies that are one line: integer, big number, simple string, error, null, boolean,
#: double.
_ONE_LINE: dict[int, Callable[[bytes], Any]] = {
    ord(":"): int, ord("("): int, ord("+"): bytes, ord("-"): _error, ord("_"): _null,
    ord("#"): _boolean, ord(","): float,
}  # fmt: skip
_BLOBS = b"$=!"  # bulk string, verbatim string, bulk error


def _parse(buf: bytes, pos: int) -> tuple[Any, int]:
    """The reply at `pos` of `buf` and the position after it (`_Incomplete` when cut short)."""
    if pos >= len(buf):
        raise _Incomplete
    kind, (line, pos) = buf[pos], _line(buf, pos + 1)
    one_line = _ONE_LINE.get(kind)
    if one_line is not None:
        return one_line(line), pos
    if kind in _BLOBS:
        return _blob(kind, int(line), buf, pos)
    return _aggregate(kind, int(line), buf, pos)


def _blob(kind: int, size: int, buf: bytes, pos: int) -> tuple[Any, int]:
    if size < 0:
        return None, pos
    end = pos + size
    if len(buf) < end + 2:
        raise _Incomplete
    data = buf[pos:end]
    if kind == ord("!"):
        return _error(data), end + 2
    return (data[4:] if kind == ord("=") else data), end + 2  # verbatim: after "txt:"


def _aggregate(kind: int, size: int, buf: bytes, pos: int) -> tuple[Any, int]:
    if kind in b"*~>":  # array, set, push
        if size < 0:
            return None, pos
        items = []
        for _ in range(size):
            item, pos = _parse(buf, pos)
            items.append(item)
        return (_PUSH if kind == ord(">") else items), pos
    if kind in b"%|":  # map, attribute (metadata before the reply it describes)
        found = {}
        for _ in range(size):
            key, pos = _parse(buf, pos)
            found[key], pos = _parse(buf, pos)
        return (found, pos) if kind == ord("%") else _parse(buf, pos)
    raise RedisConnectionError(f"unreadable reply from Redis (type byte {bytes([kind])!r})")


async def read_replies(
    reader: asyncio.StreamReader, count: int, timeout_s: float | None
) -> tuple[list[Any], bool]:
    """The next `count` replies on `reader`, within `timeout_s` in all (redis-py's
    `TimeoutError` when it passes; None: the caller bounds the wait, as `Watchdog` does), and
    whether the connection is still in step: False when more than a whole number of replies
    was read (what follows them is lost, so the caller drops the connection). A connection
    that closes or breaks is redis-py's `ConnectionError`; after any error the caller drops
    the connection too."""
    if timeout_s is None:
        return await _read_replies(reader, count)
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_replies(reader, count)
    except TimeoutError:
        raise RedisTimeoutError(f"no reply from Redis within {timeout_s} s") from None


async def _read_replies(reader: asyncio.StreamReader, count: int) -> tuple[list[Any], bool]:
    buf, pos, replies = b"", 0, list[Any]()
    try:
        while len(replies) < count:
            try:
                reply, pos = _parse(buf, pos)
            except _Incomplete:
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    raise RedisConnectionError("Redis closed the connection") from None
                buf, pos = buf[pos:] + chunk, 0
                continue
            if reply is not _PUSH:
                replies.append(reply)
    except OSError as exc:
        raise RedisConnectionError(f"reading from Redis failed: {exc}") from exc
    return replies, pos == len(buf)


class Watchdog:
    """Bounds exchanges on connections by closing the ones past their deadline, looked at every
    `tick_s` while any is watched: one timer for all of them, not a timer (an
    `asyncio.timeout`) each, which was about a fifteenth of a no-op task's CPU on Redis. An
    exchange closed this way ends in a `ConnectionError` of its read, which the caller turns
    into the `TimeoutError` it is (`expired`)."""

    def __init__(self, tick_s: float = 0.05) -> None:
        self._tick_s = tick_s
        self._due: dict[asyncio.BaseTransport, float] = {}
        self._expired: set[asyncio.BaseTransport] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, transport: asyncio.BaseTransport, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._due[transport] = loop.time() + timeout_s
        self._expired.discard(transport)
        if self._timer is None or self._loop is not loop:  # (a timer of a loop now gone)
            self._loop, self._timer = loop, loop.call_later(self._tick_s, self._look)

    def done(self, transport: asyncio.BaseTransport) -> bool:
        """Stop watching `transport`; whether its deadline had passed (it was closed)."""
        self._due.pop(transport, None)
        expired = transport in self._expired
        self._expired.discard(transport)
        return expired

    def _look(self) -> None:
        self._timer = None
        if not self._due:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for transport, due in list(self._due.items()):
            if due <= now:
                del self._due[transport]
                self._expired.add(transport)
                transport.abort()  # type: ignore[attr-defined]
        if self._due:
            self._timer = loop.call_later(self._tick_s, self._look)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
