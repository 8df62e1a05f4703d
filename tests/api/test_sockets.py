"""The service on a real socket: TCP_NODELAY on accepted connections, keep-alive survives a
failure, every 5xx in the error shape, and no credential in the access log."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from stratamem.api import create_app
from stratamem.api.server import bind
from tests.api.conftest import open_services
from tests.api.live import live

ACCESS_LOGGER = "uvicorn.access"


async def test_accepted_connections_have_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP: `bind` names it."""
    sock = bind("127.0.0.1", 0)
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted = transport.get_extra_info("socket")
            seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    try:
        host, port = sock.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        assert await asyncio.wait_for(seen, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
def failing_app(tmp_path: Path) -> Iterator[FastAPI]:
    app = create_app(open_services(tmp_path), close_on_shutdown=True)

    async def boom() -> None:
        raise RuntimeError("an unexpected failure")

    app.add_api_route("/boom", boom)  # a route of the test's own, failing like a bug would
    yield app


def request(sock: socket.socket, path: str) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a kept-alive connection; the status and the body."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    reader = sock.makefile("rb")
    status = int(reader.readline().split()[1])
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, reader.read(length)


def test_an_unexpected_failure_is_a_shaped_500_and_the_connection_stays(
    failing_app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with live(failing_app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            for _ in range(3):
                status, body = request(sock, "/boom")
                assert status == 500
                assert json.loads(body)["error"]["type"] == "internal_error"
                assert "unexpected failure" not in body.decode()
                assert request(sock, "/v1/health")[0] == 200
    assert any("unexpected failure" in str(r.exc_info) for r in caplog.records if r.exc_info)


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_access_log_never_shows_a_query_string(tmp_path: Path) -> None:
    kept = Kept()
    with live(create_app(open_services(tmp_path), close_on_shutdown=True), "info") as url:
        logging.getLogger(ACCESS_LOGGER).addHandler(kept)  # after uvicorn configured its logs
        try:
            host, port = url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                assert request(sock, "/v1/health?api_key=sk-secret-123")[0] == 422
                assert request(sock, "/v1/stats?api_key=sk-secret-123&x=1")[0] == 422
        finally:
            logging.getLogger(ACCESS_LOGGER).removeHandler(kept)
    assert any("/v1/health" in line for line in kept.lines), kept.lines
    assert not any("secret" in line or "api_key" in line for line in kept.lines), kept.lines
