"""The service's error shape, `{"error": {"type", "message"}}`, back into `stratamem.errors`.

The table is derived from the one wire vocabulary the service answers by
(`stratamem.errors.WIRE_ERRORS`); an unknown type falls back to the family of its HTTP status.
"""

from __future__ import annotations

import json

import httpx

from stratamem.errors import (
    FRAMEWORK_ERRORS,
    WIRE_ERRORS,
    Forbidden,
    InvalidInput,
    NotFound,
    StoreError,
    StratamemError,
    Throttled,
    Unauthenticated,
)
from stratamem.httpretry import parse_retry_after


def _error_of_type() -> dict[str, type[StratamemError]]:
    """Each wire type's family: its first row in the service's table, then the framework's."""
    table: dict[str, type[StratamemError]] = {}
    for family, _, kind in WIRE_ERRORS:
        table.setdefault(kind, family)
    for _, kind, raised in FRAMEWORK_ERRORS:
        if raised is not None:
            table.setdefault(kind, raised)
    return table


#: Error type of the service → the error the client raises (`stratamem.errors.WIRE_ERRORS`).
ERROR_OF_TYPE = _error_of_type()

#: A status → the family raised for a type this client does not know (a newer service's).
ERROR_OF_STATUS: dict[int, type[StratamemError]] = {
    400: InvalidInput,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    408: InvalidInput,
    409: StoreError,
    413: InvalidInput,
    422: InvalidInput,
    429: Throttled,
}


def error_from(response: httpx.Response, now_s: float) -> StratamemError:
    """The typed error for a response with an error status."""
    kind, message = _shape(response)
    where = f"{response.request.method} {response.request.url.path}"
    text = f"{message} ({where} → {response.status_code} {kind})"
    if response.status_code == 429 or (response.status_code == 503 and _asks_to_wait(response)):
        throttled = Throttled(text)
        throttled.retry_after_s = parse_retry_after(response.headers.get("retry-after"), now_s)
        return throttled
    family = ERROR_OF_TYPE.get(kind) or ERROR_OF_STATUS.get(response.status_code)
    return (family or StratamemError)(text)


def _asks_to_wait(response: httpx.Response) -> bool:
    return response.headers.get("retry-after") is not None


def _shape(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "http_error", response.text[:200] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "http_error", str(body)[:200]
    return str(error.get("type", "http_error")), str(error.get("message", ""))
