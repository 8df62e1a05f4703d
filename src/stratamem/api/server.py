"""Run the service in this process: bind the socket, then serve until SIGINT / SIGTERM."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import uvicorn

from stratamem.api.app import create_app
from stratamem.api.background import Background
from stratamem.api.services import Services
from stratamem.api.settings import AllSettings, load_settings
from stratamem.errors import ConfigError

__all__ = ["bind", "load_settings", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port); `ConfigError` saying what to change."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another"
            " STRATAMEM_SERVER_HOST / STRATAMEM_SERVER_PORT (or --host / --port)"
        ) from exc
    sock.listen(128)
    return sock


def serve(settings: AllSettings, announce: Callable[[str], None]) -> None:
    """Open the store and pipeline, listen, announce the address and serve until stopped."""
    core, server, pipeline = settings
    services = Services.open(core, server, pipeline)
    try:
        background = Background(services, pipeline, server.workers)
        sock = bind(server.host, server.port)
    except ConfigError:
        asyncio.run(services.aclose())
        raise
    host, port = sock.getsockname()[:2]
    workers = (
        f"{server.workers} pipeline consumers" if server.workers
        else "API only: pipeline tasks are left to `stratamem worker` processes"
    )
    announce(f"stratamem listening on http://{host}:{port} ({workers}; data in {core.data_dir})")
    app = create_app(services, close_on_shutdown=True, background=background)
    config = uvicorn.Config(app, lifespan="on", server_header=False, log_level="info")
    uvicorn.Server(config).run(sockets=[sock])
