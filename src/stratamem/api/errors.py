"""One error shape, `{"error": {"type", "message"}}`, and one table from domain errors to status."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from stratamem.errors import (
    FRAMEWORK_ERRORS,
    WIRE_ERRORS,
    FenceResynced,
    StratamemError,
    Throttled,
)
from stratamem.httpretry import redact_urls

log = logging.getLogger(__name__)

#: Domain error family → (HTTP status, error type) (`stratamem.errors.WIRE_ERRORS`). The first
#: matching row wins.
STATUS_OF_ERROR = WIRE_ERRORS

#: Framework-level statuses (routing, body limits) → error type.
TYPE_OF_STATUS = {status: kind for status, kind, _ in reversed(FRAMEWORK_ERRORS)}


def error_body(kind: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"type": kind, "message": message}}


def error_response(
    status: int, kind: str, message: str, retry_after_s: float | None = None
) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    return JSONResponse(error_body(kind, message), status_code=status, headers=headers or None)


def public_message(error: StratamemError) -> str:
    """What a caller is told of `error`: its message, less the addresses of the endpoints and
    backends behind a failure (5xx; the log keeps them for the operator)."""
    return tenant_text(str(error)) if status_of(error)[0] >= 500 else str(error)


def tenant_text(error: str) -> str:
    """An error as a tenant may read it: the endpoints' addresses (internal, perhaps with a
    credential) are the operator's, and read "the endpoint"; the stage is named in the text."""
    return redact_urls(error, for_tenant=True)


def status_of(error: StratamemError) -> tuple[int, str]:
    for family, status, kind in STATUS_OF_ERROR:
        if isinstance(error, family):
            return status, kind
    return 500, "internal_error"


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, StratamemError):  # registered for StratamemError only
        raise exc
    if status_of(exc)[0] >= 500:
        # An expected failure (an endpoint or backend down) is one WARNING line (`stratamem.logs`).
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return domain_error_response(exc)


def domain_error_response(exc: StratamemError) -> JSONResponse:
    """The answer to `exc` (`STATUS_OF_ERROR`), with `Retry-After` when it says when to retry."""
    status, kind = status_of(exc)
    retry_after = exc.retry_after_s if isinstance(exc, Throttled | FenceResynced) else None
    return error_response(status, kind, public_message(exc), retry_after)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        raise exc
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
        return error_response(422, "invalid_input", _unreadable_body(exc.__cause__))
    kind = TYPE_OF_STATUS.get(exc.status_code, "http_error")
    return error_response(exc.status_code, kind, str(exc.detail))


def _unreadable_body(cause: ValueError) -> str:
    """FastAPI's 400 for a body its JSON reader raised on (past the 4,300 digits Python
    converts to an integer), said as what to change."""
    return (
        f"the request body is not JSON this service reads ({cause}): integers beyond 64 bits"
        " are refused, send such a number as a string"
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):  # registered for RequestValidationError only
        raise exc
    parts = [_explained(error, request) for error in exc.errors()]
    return error_response(422, "invalid_input", "; ".join(parts) or "invalid request")


def _explained(error: Mapping[str, Any], request: Request) -> str:
    """One validation error as what to fix: where (`messages[0].role`), and why."""
    loc = [str(p) for p in error.get("loc", ())]
    kind, context = error.get("type"), error.get("ctx") or {}
    if kind == "json_invalid":
        return (
            f"the request body is not valid JSON: {context.get('error', 'unreadable')} at"
            f" character {loc[-1] if len(loc) > 1 else '?'}"
        )
    if loc == ["body"] and kind in _NOT_AN_OBJECT and not _declares_json(request):
        return "the request body must be a JSON object, sent with Content-Type: application/json"
    if kind == "value_error" and "error" in context:  # our own checks name the place
        return str(context["error"])
    if loc[:1] in (["query"], ["path"]) and len(loc) > 1:
        return f"{loc[0]} parameter {loc[1]}: {error.get('msg', 'invalid')}"
    where = _path(loc[1:] if loc[:1] == ["body"] else loc) or "the request body"
    return f"{where}: {error.get('msg', 'invalid')}"


_NOT_AN_OBJECT = frozenset({"model_attributes_type", "dict_type", "model_type", "missing"})


def _declares_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _path(loc: list[str]) -> str:
    """`["messages", "0", "role"]` as `messages[0].role`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text


def install(app: FastAPI) -> None:
    """Every error leaves the service in the one shape."""
    app.add_exception_handler(StratamemError, _domain_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
