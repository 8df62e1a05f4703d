"""The app on a real socket: uvicorn in a thread of this process (lifespan included)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI

from stratamem.api.connections import ConnectionLimits, GuardedServer
from stratamem.api.server import bind, server_config

START_TIMEOUT_S = 30.0


@contextmanager
def live(
    app: FastAPI, log_level: str = "warning", limits: ConnectionLimits | None = None
) -> Iterator[str]:
    """The base URL of `app` served on a free port, as `serve` serves it (its connections
    held to `limits`); stopped (lifespan shutdown) on exit."""
    with live_server(app, log_level, limits) as (url, _):
        yield url


@contextmanager
def live_server(
    app: FastAPI, log_level: str = "warning", limits: ConnectionLimits | None = None
) -> Iterator[tuple[str, GuardedServer]]:
    """As `live`, with the server (whose `guard` holds the connections)."""
    sock = bind("127.0.0.1", 0)
    host, port = sock.getsockname()[:2]
    config = server_config(app, shutdown_timeout_s=5, log_level=log_level)
    server = GuardedServer(config, limits or ConnectionLimits())
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)  # bounded wait for the server thread to be ready
    try:
        yield f"http://{host}:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=30)
