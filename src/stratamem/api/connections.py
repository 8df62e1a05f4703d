"""The connections `serve` holds, bounded without a proxy in front.

- At most `max_connections` are open at once. A connection over the bound takes the place of
  the one that has been idle the longest (waiting for a first request, or between requests),
  one that never sent a request first; when every open connection has a request in flight, the
  new one is answered 503 `too_many_connections` with `Retry-After` and closed.
- A request's headers must arrive whole within `header_timeout_s` of the connection's opening
  (or of the first byte of a later request on a kept-alive connection); else the connection is
  closed (with 408 when part of a request had come). The body has its own bound
  (`middleware.BodyLimit`), a kept-alive connection that sends nothing `keep_alive_timeout_s`.
- When the process runs out of file descriptors, asyncio stops accepting for a second and says
  so to the loop's exception handler: here that closes idle connections (one line in the log),
  so that accepting recovers even while they are held.
- At start, `check_descriptors` makes sure the process may open enough descriptors for the
  bound (raising its soft limit when the hard limit allows).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import resource
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from stratamem.api.errors import error_body
from stratamem.errors import ConfigError

log = logging.getLogger(__name__)

#: Descriptors the process needs beside its connections: the store and the pipeline's files or
#: sockets, the embedding model, logs, the listening socket, worker threads' pipes.
RESERVED_DESCRIPTORS = 128
#: Idle connections closed at once when accepting fails for want of descriptors.
SHED_AT_EXHAUSTION = 64
#: Least time between two log lines about running out of descriptors.
EXHAUSTION_LOG_S = 5.0
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 1000
    header_timeout_s: float = 10.0
    keep_alive_timeout_s: int = 5


def _raw_answer(status: int, reason: str, kind: str, message: str, retry: bool) -> bytes:
    """A whole HTTP/1.1 answer in the error shape that closes the connection (written before
    any request was read, so without the server's request machinery)."""
    body = json.dumps(error_body(kind, message)).encode()
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close"]  # fmt: skip
    if retry:
        head.append("retry-after: 1")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class ConnectionGuard:
    """The open connections of one server, and the limits they are held to."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[GuardedH11Protocol, None] = {}
        self.refused = 0
        self.evicted = 0
        self.exhausted = self.shed_total = 0
        self._last_told = -EXHAUSTION_LOG_S
        self.too_many = _raw_answer(
            503, "Service Unavailable", "too_many_connections",
            f"the service holds {limits.max_connections} connections, each with a request in"
            " flight: ask again shortly", retry=True,
        )  # fmt: skip
        self.too_slow = _raw_answer(
            408, "Request Timeout", "headers_too_slow",
            f"the request's headers did not arrive within {limits.header_timeout_s:g} s",
            retry=False,
        )  # fmt: skip
        guard = self
        self.protocol: type[GuardedH11Protocol] = type(
            "GuardedH11", (GuardedH11Protocol,), {"guard": guard}
        )

    def admit(self, connection: GuardedH11Protocol) -> bool:
        """Make room for `connection` (closing the idlest one at the bound), or refuse it."""
        if len(self.open) >= self.limits.max_connections:
            idlest = self._idlest()
            if idlest is None:
                self.refused += 1
                return False
            self.evict(idlest)
        self.open[connection] = None
        return True

    def release(self, connection: GuardedH11Protocol) -> None:
        self.open.pop(connection, None)

    def evict(self, connection: GuardedH11Protocol) -> None:
        self.evicted += 1
        self.open.pop(connection, None)
        connection.close_idle()

    def shed(self, count: int) -> int:
        """Close up to `count` idle connections, idlest first; how many were closed."""
        idle = sorted((c for c in self.open if not c.in_request), key=GuardedH11Protocol.idleness)
        for connection in idle[:count]:
            self.evict(connection)
        return min(count, len(idle))

    def _idlest(self) -> GuardedH11Protocol | None:
        idle = (c for c in self.open if not c.in_request)
        return min(idle, key=GuardedH11Protocol.idleness, default=None)

    def loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: running out of descriptors sheds idle connections
        (asyncio accepts again a second later by itself); anything else as asyncio would."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS:
            self._out_of_descriptors(loop.time(), exc)
            return
        if isinstance(exc, ValueError) and "_start_serving" in repr(context.get("handle")):
            return  # a retry of accepting that asyncio scheduled, run after the socket closed
        loop.default_exception_handler(context)

    def _out_of_descriptors(self, now: float, exc: OSError) -> None:
        """Shed idle connections; say so once per `EXHAUSTION_LOG_S` (asyncio reports every
        accept it tried in that tick, up to the listen backlog)."""
        self.exhausted += 1
        self.shed_total += self.shed(SHED_AT_EXHAUSTION)
        if now - self._last_told < EXHAUSTION_LOG_S:
            return
        log.warning(
            "out of file descriptors (%s): %d connections open, %d idle ones closed to make"
            " room (%d failed accepts); accepting again in a second", exc.strerror,
            len(self.open), self.shed_total, self.exhausted,
        )  # fmt: skip
        self._last_told, self.exhausted, self.shed_total = now, 0, 0


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, admitted by a `ConnectionGuard` and held to its header
    deadline."""

    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admitted = False
        self.served = 0
        self.idle_since = 0.0
        self.header_deadline: asyncio.TimerHandle | None = None
        self.partial = False

    @property
    def in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def idleness(self) -> tuple[bool, float]:
        """Sorts the connection to close first first: never served, then idle the longest."""
        return self.served > 0, self.idle_since

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self.guard.admit(self):
            transport.write(self.guard.too_many)
            transport.close()
            return
        self.admitted = True
        super().connection_made(transport)
        self.idle_since = self.loop.time()
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.admitted:
            return
        self.guard.release(self)
        self._stop_waiting()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.in_request:
            if self.header_deadline is None:  # a later request begins on a kept-alive connection
                self._await_headers()
            self.partial = True
        super().data_received(data)
        if self.in_request:
            self._stop_waiting()

    def on_response_complete(self) -> None:
        self.served += 1
        self.idle_since = self.loop.time()
        super().on_response_complete()

    def close_idle(self) -> None:
        """Close this connection, which has no request in flight (the guard needs its place)."""
        self._stop_waiting()
        if not self.transport.is_closing():
            self.transport.close()

    def _await_headers(self) -> None:
        self.partial = False
        self.header_deadline = self.loop.call_later(
            self.guard.limits.header_timeout_s, self._headers_too_slow
        )

    def _stop_waiting(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _headers_too_slow(self) -> None:
        self.header_deadline = None
        if self.in_request or self.transport.is_closing():
            return
        if self.partial and self.conn.our_state is h11.IDLE:
            self.transport.write(self.guard.too_slow)
        self.transport.close()


class GuardedServer(uvicorn.Server):
    """uvicorn's server with its connections held by a `ConnectionGuard`."""

    def __init__(self, config: uvicorn.Config, limits: ConnectionLimits) -> None:
        self.guard = ConnectionGuard(limits)
        config.http = self.guard.protocol
        config.timeout_keep_alive = limits.keep_alive_timeout_s
        super().__init__(config)

    async def startup(self, sockets: list[Any] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.guard.loop_error)
        await super().startup(sockets)


def check_descriptors(max_connections: int) -> int:
    """The soft limit on open files, raised (up to the hard limit) when it leaves less than
    `max_connections` plus `RESERVED_DESCRIPTORS` beside the ones open now; `ConfigError`
    saying what to change when even the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = _open_descriptors() + max_connections + RESERVED_DESCRIPTORS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        log.info("raised the open-files limit from %d to %d for the connection bound", soft, needed)
        return needed
    raise ConfigError(
        f"STRATAMEM_SERVER_MAX_CONNECTIONS={max_connections} needs about {needed} open files,"
        f" but this process may open at most {hard} (ulimit -n; LimitNOFILE= under systemd,"
        " --ulimit nofile= under Docker): raise that limit, or lower max_connections"
    )


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: count none, the reserve covers the usual few
        return 0
