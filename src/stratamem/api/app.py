"""The application factory: routes, the one error shape, body limit, metrics, optional CORS."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.telemetry import TelemetryConfig
from mcp.server.mcpserver import MCPServer

from stratamem.api import errors, ui
from stratamem.api.background import Background
from stratamem.api.mcp_server import build_mcp, http_route, tenant_from_key
from stratamem.api.middleware import BodyLimit, CatchAll, InFlight, RequestMetrics, ShapedCORS
from stratamem.api.routes import (
    admin,
    anthropic,
    failures,
    health,
    inspect,
    layers,
    lineage,
    memory,
    offload,
    operator,
    pipeline,
    proxy,
)
from stratamem.api.services import Services
from stratamem.api.strict_query import reject_unknown_query
from stratamem.cancelling import cancel_and_wait
from stratamem.errors import EmbeddingError

log = logging.getLogger(__name__)

#: FastAPI's own OpenTelemetry hooks stay off: nothing is sent anywhere unless configured.
NO_TELEMETRY: TelemetryConfig = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}

#: How long the requests still in flight at shutdown get to unwind before they are cancelled again.
UNWIND_S = 5.0

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_app(
    services: Services,
    *,
    close_on_shutdown: bool = False,
    background: Background | None = None,
) -> FastAPI:
    """The REST API over `services`.

    `background` (the pipeline worker and scheduler) runs from startup to shutdown; with
    `close_on_shutdown`, the app closes the services at shutdown.
    """
    mcp = build_mcp(services.memory, tenant_from_key(services.tenants), services.offload)
    requests: set[asyncio.Task[Any]] = set()
    app = FastAPI(
        title="stratamem",
        summary="Layered long-term memory for AI agents.",
        version="1",
        lifespan=_lifespan(services, close_on_shutdown, background, mcp, requests),
        telemetry=NO_TELEMETRY,
        docs_url=None,  # the Swagger and ReDoc pages load their scripts from a CDN
        redoc_url=None,
        dependencies=[Depends(reject_unknown_query)],
    )
    app.state.services = services
    errors.install(app)
    routers = (health, memory, layers, lineage, offload, pipeline, failures, admin, inspect,
               operator, proxy, anthropic)  # fmt: skip
    for module in routers:
        app.include_router(module.router)
    ui.install(app)
    app.router.routes.append(http_route(mcp, services.tenants, services.admit))
    _install_middleware(app, services)
    app.add_middleware(InFlight, tasks=requests)
    return app


def _install_middleware(app: FastAPI, services: Services) -> None:
    """Each one added wraps the ones before: the body limit runs before anything reads, CORS
    headers reach every answer (a 413 too), metrics see every request, and any failure is
    answered in the error shape."""
    settings = services.settings
    proxy_limit = services.proxy_settings.max_body_bytes
    app.add_middleware(
        BodyLimit, limit=settings.max_body_bytes, timeout_s=settings.body_timeout_s,
        prefix_limits={prefix: proxy_limit for prefix in proxy.PREFIXES},
    )  # fmt: skip
    if settings.cors_origins:
        app.add_middleware(
            ShapedCORS,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(RequestMetrics, metrics=services.metrics, monotonic=services.monotonic)
    app.add_middleware(CatchAll)


def _lifespan(
    services: Services,
    close_on_shutdown: bool,
    background: Background | None,
    mcp: MCPServer,
    requests: set[asyncio.Task[Any]],
) -> Lifespan:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if close_on_shutdown:
                stack.push_async_callback(services.aclose)
            stack.push_async_callback(services.proxy.aclose)  # its client lives on this loop
            await stack.enter_async_context(mcp.session_manager.run())
            loading = asyncio.get_running_loop().create_task(_load_embedder(services))
            stack.push_async_callback(cancel_and_wait, loading)
            services.memory.start_background()
            if background is not None:
                await background.start()
                stack.push_async_callback(background.stop)
            stack.push_async_callback(_unwound, requests)
            yield

    return lifespan


async def _load_embedder(services: Services) -> None:
    """Load the embedding model while the API already answers (`/v1/ready` says when)."""
    started = services.monotonic()
    try:
        await services.memory.load_embedder()
    except EmbeddingError:
        log.exception("the embedding model failed to load; /v1/ready stays 503")
        return
    log.info("embedding model loaded in %.2f s", services.monotonic() - started)


async def _unwound(requests: set[asyncio.Task[Any]]) -> None:
    """First at shutdown: the requests still in flight (the server cancelled them at its
    shutdown bound) unwind before what they use stops: they release their locks and end
    their records; one still running after `UNWIND_S` (a lost cancellation) is cancelled
    again. What they had not finished stays owed (cursors, flush requests, queued tasks)."""
    if not requests:
        return
    _, running = await asyncio.wait(list(requests), timeout=UNWIND_S)
    await asyncio.gather(*(cancel_and_wait(task) for task in running), return_exceptions=True)
