"""Run the service in this process: bind the socket, then serve until SIGINT / SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from stratamem import logs
from stratamem.api.app import create_app
from stratamem.api.background import Background
from stratamem.api.connections import (
    ConnectionLimits,
    GuardedServer,
    check_descriptors,
)
from stratamem.api.services import Services
from stratamem.api.settings import AllSettings, ServerSettings, load_settings
from stratamem.core import AsyncMemory
from stratamem.errors import ConfigError
from stratamem.httpretry import redact_url
from stratamem.llm import LLMClient

__all__ = [
    "DrainingServer", "GuardedServer", "bind", "limits_of", "load_settings", "run_process",
    "serve", "server_config",
]  # fmt: skip

ACCESS_LOGGER = "uvicorn.access"


class WithoutQueryStrings(logging.Filter):
    """Cut the query string off every path a log record names: a query may carry a credential
    (`?api_key=…`) or a user's words, and neither belongs in a log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_without_query(arg) for arg in record.args)
        return True


def _without_query(value: object) -> object:
    if isinstance(value, str) and value.startswith("/") and "?" in value:
        return value.partition("?")[0]
    return value


def server_config(
    app: FastAPI, shutdown_timeout_s: int, log_level: str = "info"
) -> uvicorn.Config:
    """How uvicorn serves `app`: lifespan on, no server header, no query strings logged, the
    process's logging left as it is (`stratamem.logs`); at a stop, requests in flight get
    `shutdown_timeout_s`, then are cancelled and the lifespan's shutdown runs (without a bound,
    one open request would keep the process up for ever). Serve it with a `GuardedServer`."""
    config = uvicorn.Config(
        app, lifespan="on", server_header=False, log_level=log_level, log_config=None,
        timeout_graceful_shutdown=shutdown_timeout_s,
    )  # fmt: skip
    access = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, WithoutQueryStrings) for f in access.filters):
        access.addFilter(WithoutQueryStrings())
    return config


def limits_of(settings: ServerSettings) -> ConnectionLimits:
    return ConnectionLimits(
        settings.max_connections, settings.header_timeout_s, settings.keep_alive_timeout_s
    )


class DrainingServer(GuardedServer):
    """The guarded server that, when it starts to stop, also stops the pipeline work beside it:
    the workers take no new task and their running tasks drain alongside the requests in
    flight, under one bound (the worker's grace period is capped by it, see `Background`),
    instead of getting their own grace period after the requests' bound. With `stop_on`, a
    descriptor that becomes readable when the process should stop (the supervisor of
    `serve --processes` died: `processes.py`), it stops as at SIGTERM."""

    def __init__(
        self,
        config: uvicorn.Config,
        limits: ConnectionLimits,
        background: Background,
        stop_on: int | None = None,
    ) -> None:
        super().__init__(config, limits)
        self.background = background
        self.stop_on = stop_on

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.stop_on is not None:
            asyncio.get_running_loop().add_reader(self.stop_on, self._stop_asked)
        await super().startup(sockets)

    def _stop_asked(self) -> None:
        if self.stop_on is not None:
            asyncio.get_running_loop().remove_reader(self.stop_on)
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.background.begin_stop()
        await super().shutdown(sockets)


def bind(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A listening socket (port 0: any free port); `ConfigError` saying what to change. With
    `reuse_port`, others may bind the same port the same way (`SO_REUSEPORT`: the kernel
    spreads new connections over the listening ones); without `listen`, it only holds the port."""
    try:
        family, kind, proto = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][:3]
        # With the protocol named, asyncio sets TCP_NODELAY on every accepted connection
        # (without it, each keep-alive answer after the first waits ~40 ms for delayed ACKs).
        sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another"
            " STRATAMEM_SERVER_HOST / STRATAMEM_SERVER_PORT (or --host / --port)"
        ) from exc
    if listen:
        sock.listen(128)
    return sock


def serve(settings: AllSettings, announce: Callable[[str], None]) -> None:
    """Open the store and pipeline, listen, announce the address and serve until stopped;
    with `processes` over 1, `processes.supervise` runs that many API processes instead."""
    server = settings.server
    if server.processes > 1:
        from stratamem.api.processes import supervise  # noqa: PLC0415  (imports this module)

        supervise(settings, announce)
        return
    run_process(settings, lambda: bind(server.host, server.port), _announcing(settings, announce))


Described = Callable[[str, int, AsyncMemory], None]
"""Told, once the process is ready to serve, its address (host, port) and its memory."""


def _announcing(settings: AllSettings, announce: Callable[[str], None]) -> Described:
    core, server, _ = settings

    def described(host: str, port: int, memory: AsyncMemory) -> None:
        announce(
            f"stratamem listening on http://{host}:{port} ({where_tasks_run(server.workers)};"
            f" data in {core.data_dir}; {layers_mode(memory)})"
        )

    return described


def where_tasks_run(workers: int, within: str = "") -> str:
    """How the announcement says where pipeline tasks run: `workers` consumers (`within` the
    process that runs them), or none."""
    if workers:
        return f"{workers} pipeline consumers{within}"
    return "API only: pipeline tasks are left to `stratamem worker` processes"


def run_process(
    settings: AllSettings,
    listen: Callable[[], socket.socket],
    ready: Described,
    stop_on: int | None = None,
    embedding_poll_s: float | None = None,
) -> None:
    """Serve in this process on the socket `listen` gives, once the services are open, until
    SIGTERM / SIGINT (or `stop_on` readable); `ready` is told the address first."""
    core, server, pipeline = settings
    logs.configure()
    check_descriptors(server.max_connections)
    services = Services.open(core, server, pipeline)
    try:
        background = Background(
            services, pipeline, server.workers, stop_within_s=server.shutdown_timeout_s,
            embedding_poll_s=embedding_poll_s,
        )  # fmt: skip
        sock = listen()
    except ConfigError:
        asyncio.run(services.aclose())
        raise
    host, port = sock.getsockname()[:2]
    ready(host, port, services.memory)
    app = create_app(services, close_on_shutdown=True, background=background)
    config = server_config(app, server.shutdown_timeout_s)
    uvicorn_server = DrainingServer(config, limits_of(server), background, stop_on)
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        uvicorn_server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)


def layers_mode(memory: AsyncMemory) -> str:
    """Whether the memory layers call an LLM (which model, where) or run offline."""
    llm = memory.llm
    if llm is None:
        return (
            "the layers run offline: no LLM endpoint (STRATAMEM_LLM_BASE_URL and"
            " STRATAMEM_LLM_MODEL)"
        )
    if isinstance(llm, LLMClient) and llm.settings.base_url:
        return f"the layers call {llm.settings.model} at {redact_url(llm.settings.base_url)}"
    return "the layers call an LLM"


def _stopped(signum: int, frame: FrameType | None) -> None:
    """uvicorn handles SIGTERM itself, then raises it again after its orderly shutdown: the
    process then exits 0, as `stratamem worker` does (a stop was asked for and done)."""
    raise SystemExit(0)
