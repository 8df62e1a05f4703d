"""Connections that never finish a request cannot wedge the service: a bound on open
connections (the idlest make room, 503 when all are busy), a deadline for headers, idle
keep-alive closed; real sockets against the app served as `serve` serves it."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from stratamem.api import create_app
from stratamem.api.connections import ConnectionLimits
from tests.api.conftest import open_services
from tests.api.live import live, live_server
from tests.api.test_sockets import request

DEADLINE_S = 30.0
HEALTH_TIMEOUT_S = 1.0


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    yield create_app(open_services(tmp_path, body_timeout_s=1.0), close_on_shutdown=True)


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@contextmanager
def idle_connections(url: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send nothing, held until the block ends."""
    with ExitStack() as stack:
        socks = []
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection(address(url), timeout=10))
            socks.append(sock)
        yield socks


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (an EOF or a reset is waiting), without blocking."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b"" or closed_by_server(sock)
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def wait_until_closed(socks: list[socket.socket]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not all(closed_by_server(s) for s in socks):
        assert time.monotonic() < deadline, "the server kept idle connections open"
        time.sleep(0.05)  # polling a real server's timers, bounded by the deadline


def healthy(url: str) -> bool:
    return httpx.get(f"{url}/v1/health", timeout=HEALTH_TIMEOUT_S).status_code == 200


def test_idle_connections_over_the_bound_do_not_starve_health_and_are_closed(
    app: FastAPI,
) -> None:
    limits = ConnectionLimits(max_connections=8, header_timeout_s=2.0)
    with live_server(app, limits=limits) as (url, server), idle_connections(url, 24) as socks:
        for _ in range(5):  # each health check takes the place of an idle connection
            assert healthy(url)
        wait_until_closed(socks)  # the first by the bound, the last by the header deadline
        assert healthy(url)
    assert server.guard.evicted >= 24 - 8
    assert server.guard.refused == 0


def test_headers_that_never_finish_get_408_and_the_connection_closed(app: FastAPI) -> None:
    with live(app, limits=ConnectionLimits(header_timeout_s=0.5)) as url:
        with socket.create_connection(address(url), timeout=10) as sock:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: t\r\n")  # no blank line: never done
            answer = sock.makefile("rb").read()  # until the server closes
        assert answer.startswith(b"HTTP/1.1 408 ")
        body = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert body["error"]["type"] == "headers_too_slow"


def test_a_kept_alive_connection_is_held_to_the_deadline_of_its_next_request(
    app: FastAPI,
) -> None:
    limits = ConnectionLimits(header_timeout_s=0.5, keep_alive_timeout_s=30)
    with live(app, limits=limits) as url:
        with socket.create_connection(address(url), timeout=10) as sock:
            assert request(sock, "/v1/health")[0] == 200
            sock.sendall(b"GET /v1/health HTTP/1.1\r\n")  # a next request that stalls
            answer = sock.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 408 ")


def test_an_idle_kept_alive_connection_is_closed(app: FastAPI) -> None:
    limits = ConnectionLimits(keep_alive_timeout_s=1)
    with live(app, limits=limits) as url, socket.create_connection(address(url), 10) as sock:
        assert request(sock, "/v1/health")[0] == 200
        wait_until_closed([sock])


def held_requests(url: str, count: int, stack: ExitStack) -> list[socket.socket]:
    """`count` connections each with a request in flight: headers sent, body still owed."""
    socks = []
    for _ in range(count):
        sock = stack.enter_context(socket.create_connection(address(url), timeout=10))
        sock.sendall(b"POST /v1/capture HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{")  # fmt: skip
        socks.append(sock)
    return socks


def test_when_every_connection_is_busy_a_new_one_gets_503_and_service_resumes(
    app: FastAPI,
) -> None:
    limits = ConnectionLimits(max_connections=3)
    with live_server(app, limits=limits) as (url, server), ExitStack() as stack:
        busy = held_requests(url, 3, stack)
        deadline = time.monotonic() + DEADLINE_S
        while sum(c.in_request for c in list(server.guard.open)) < 3:
            assert time.monotonic() < deadline, "the server did not read the requests"
            time.sleep(0.01)  # polling the server thread's progress, bounded
        with socket.create_connection(address(url), timeout=10) as extra:
            answer = extra.makefile("rb").read()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in head.lower()
        assert json.loads(body)["error"]["type"] == "too_many_connections"
        for sock in busy:  # the body deadline (1 s) ends each request with 408
            assert sock.makefile("rb").read().startswith(b"HTTP/1.1 408 ")
        assert healthy(url)
