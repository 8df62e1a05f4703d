"""The service's error shape, `{"error": {"type", "message"}}`, back into `stratamem.errors`.

The table is the inverse of the service's (`stratamem.api.errors`); a test keeps the two in step.
An unknown type falls back to the family of its HTTP status.
"""

from __future__ import annotations

import json

import httpx

from stratamem.errors import (
    AlreadyExists,
    ConfigError,
    EmbeddingError,
    EmbeddingMismatch,
    Forbidden,
    InvalidIdentifier,
    InvalidInput,
    LayerError,
    LLMError,
    LockBusy,
    MemoryChanged,
    NotFound,
    PipelineError,
    StoreError,
    StratamemError,
    Throttled,
    Unauthenticated,
)
from stratamem.httpretry import parse_retry_after

#: Error type of the service → the error the client raises. `conflict` is what a caller of the
#: client meets as a memory edited meanwhile (`update_memory`, `forget_memory`).
ERROR_OF_TYPE: dict[str, type[StratamemError]] = {
    "unauthenticated": Unauthenticated,
    "forbidden": Forbidden,
    "already_exists": AlreadyExists,
    "invalid_identifier": InvalidIdentifier,
    "invalid_input": InvalidInput,
    "bad_request": InvalidInput,
    "body_too_large": InvalidInput,
    "body_too_slow": InvalidInput,
    "cors_refused": InvalidInput,
    "rate_limited": Throttled,
    "unsupported_media_type": InvalidInput,
    "not_found": NotFound,
    "conflict": MemoryChanged,
    "embedding_mismatch": EmbeddingMismatch,
    "embedding_unavailable": EmbeddingError,
    "llm_failed": LLMError,
    "layer_failed": LayerError,
    "busy": LockBusy,
    "pipeline_unavailable": PipelineError,
    "store_error": StoreError,
    "config_error": ConfigError,
    "internal_error": StratamemError,
}

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
