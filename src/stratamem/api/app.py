"""The application factory: routes, the one error shape, body limit, metrics, optional CORS."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.telemetry import TelemetryConfig

from stratamem.api import errors
from stratamem.api.background import Background
from stratamem.api.middleware import BodyLimit, RequestMetrics
from stratamem.api.routes import admin, health, layers, memory, pipeline
from stratamem.api.services import Services

#: FastAPI's own OpenTelemetry hooks stay off: nothing is sent anywhere unless configured.
NO_TELEMETRY: TelemetryConfig = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}

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
    app = FastAPI(
        title="stratamem",
        summary="Layered long-term memory for AI agents.",
        version="1",
        lifespan=_lifespan(services, close_on_shutdown, background),
        telemetry=NO_TELEMETRY,
    )
    app.state.services = services
    errors.install(app)
    for router in (health.router, memory.router, layers.router, pipeline.router, admin.router):
        app.include_router(router)
    _install_middleware(app, services)
    return app


def _install_middleware(app: FastAPI, services: Services) -> None:
    """Outermost last: metrics see every request, the body limit runs before anything reads."""
    settings = services.settings
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=services.metrics, monotonic=services.monotonic)


def _lifespan(
    services: Services, close_on_shutdown: bool, background: Background | None
) -> Lifespan:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services.memory.start_background()
        if background is not None:
            await background.start()
        yield
        if background is not None:
            await background.stop()
        if close_on_shutdown:
            await services.aclose()

    return lifespan
