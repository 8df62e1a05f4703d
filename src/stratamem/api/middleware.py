"""ASGI middleware of the service: every failure in the error shape, request body limit (413),
CORS refusals in the error shape, request metrics, and the requests in flight."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratamem.api.errors import error_body, error_response
from stratamem.api.metrics import Metrics

log = logging.getLogger(__name__)


class _TrackedSend:
    """`send`, remembering whether the answer has begun (after that, no other can be sent)."""

    def __init__(self, send: Send) -> None:
        self.send, self.started = send, False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self.send(message)


class CatchAll:
    """An unexpected exception becomes a 500 in the error shape, and the connection stays
    usable: the exception is logged here and not re-raised (re-raising makes the server close
    a keep-alive connection under the client's next request)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tracked = _TrackedSend(send)
        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if tracked.started:  # too late for another answer: the server ends the connection
                raise
            log.error("%s %s failed", scope["method"], scope["path"], exc_info=exc)
            body = error_body("internal_error", "the service failed; the error is in its log")
            await JSONResponse(body, status_code=500)(scope, receive, send)


STOPPING = error_response(
    503, "shutting_down", "the service stopped before this request finished; what it had not"
    " done is still owed and will be done: ask again", retry_after_s=1,
)


class InFlight:
    """Keeps the task of every request being answered in `tasks`, so that the app's shutdown
    can wait for the requests the server cancelled at its shutdown bound to unwind (release
    their locks, end their records) before the store closes; a request cancelled before its
    answer began is answered 503 `shutting_down` with `Retry-After` (another instance, or this
    one restarted, can take it)."""

    def __init__(self, app: ASGIApp, tasks: set[asyncio.Task[Any]]) -> None:
        self.app, self.tasks = app, tasks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        if scope["type"] != "http" or task is None:
            await self.app(scope, receive, send)
            return
        tracked = _TrackedSend(send)
        self.tasks.add(task)
        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if tracked.started:  # too late for an answer: the server closes the connection
                raise
            # Only a stop cancels a request (the server at its bound, the app's shutdown): the
            # request ends here, answered, instead of as an error in the server's log.
            log.warning("%s %s cancelled: the service is stopping", scope["method"], scope["path"])
            await STOPPING(scope, receive, send)
        finally:
            self.tasks.discard(task)


class ShapedCORS(CORSMiddleware):
    """CORS, with a refused preflight answered in the error shape (400 `cors_refused`)."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        message = bytes(response.body).decode("utf-8", "replace")
        kept = {
            k: v for k, v in response.headers.items()
            if k.lower() not in {"content-type", "content-length"}
        }  # fmt: skip
        return JSONResponse(
            error_body("cors_refused", message), status_code=response.status_code, headers=kept
        )


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


class BodyTooSlow(HTTPException):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout_s:g} s")


class BodyLimit:
    """Refuse bodies over `limit` bytes with 413 (by Content-Length, else while reading), and
    bodies still incomplete `timeout_s` after the first read with 408: a client sending a
    few bytes now and then cannot hold a connection and a request slot for ever. Paths under a
    prefix of `prefix_limits` have that prefix's limit instead (the proxy's long conversations)."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        timeout_s: float = 30.0,
        prefix_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.default_limit = limit
        self.timeout_s = timeout_s
        self.prefix_limits = dict(prefix_limits or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        limit = next((n for p, n in self.prefix_limits.items() if path.startswith(p)),
                     self.default_limit)  # fmt: skip
        if _declared_length(scope) > limit:
            await _send_error(send, BodyTooLarge(limit))
            return
        started = False
        seen = 0
        deadline: float | None = None
        complete = False

        async def counting_receive() -> Message:
            nonlocal seen, deadline, complete
            if complete:  # the body is in: later reads wait for a disconnect, untimed
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = deadline or loop.time() + self.timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError as exc:
                raise BodyTooSlow(self.timeout_s) from exc
            complete = not message.get("more_body", False)
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except (BodyTooLarge, BodyTooSlow) as exc:
            if started:
                raise
            await _send_error(send, exc)


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def _send_error(send: Send, error: HTTPException) -> None:
    """The error in the error shape, closing the connection (the body was not read whole)."""
    kind = "body_too_large" if isinstance(error, BodyTooLarge) else "body_too_slow"
    body = json.dumps(error_body(kind, error.detail)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestMetrics:
    """Count requests and time them by method, route template and status (never by tenant)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, monotonic: Callable[[], float]) -> None:
        self.app = app
        self.metrics = metrics
        self.monotonic = monotonic

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = self.monotonic()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            self.metrics.observe_request(
                scope["method"], _route_of(scope), status, self.monotonic() - start
            )


def _route_of(scope: Scope) -> str:
    """The template of the route that answered: FastAPI's routes name themselves in the scope;
    plain Starlette routes (`/openapi.json`, `/mcp`) are found by matching the app's routes."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    for route in getattr(getattr(app, "router", None), "routes", ()):
        if isinstance(route, BaseRoute) and route.matches(scope)[0] is Match.FULL:
            found = getattr(route, "path", None)
            if isinstance(found, str):
                return found
    return "unmatched"
