"""One tree of typed errors. The edges (CLI, API) map them to exit and status codes once."""

from __future__ import annotations


class StratamemError(Exception):
    """Base of every error stratamem raises on purpose."""


class InvalidInput(StratamemError, ValueError):
    """A caller gave input that cannot be accepted; nothing was stored."""


class InvalidIdentifier(InvalidInput):
    """A tenant, session or other identifier is not of the accepted form."""


class NotFound(StratamemError, LookupError):
    """The named record does not exist in the caller's tenant."""


class ConfigError(StratamemError):
    """Settings are missing or inconsistent; the message says how to fix them."""


class StoreError(StratamemError):
    """The store failed or holds data it cannot serve."""


class MemoryChanged(StoreError):
    """A memory was superseded or forgotten between reading it and writing its next version;
    nothing was written. Read it again (its history shows what changed)."""


class EmbeddingMismatch(StoreError):
    """The store was indexed with another embedding model or dimension."""


class StaleFencingToken(StoreError):
    """A write was made under a fencing token older than the newest one for its key.

    `newest` is the token the store had recorded for the key when it refused (None when the
    refusal came from elsewhere, e.g. an execution fenced by a later one): a lock grant below
    it means the grants' counter went backwards (`PipelineBackend.raise_fence`).
    """

    def __init__(self, message: str, *, newest: int | None = None) -> None:
        super().__init__(message)
        self.newest = newest


class FenceResynced(StaleFencingToken):
    """The store refused a held lock's grant because the pipeline backend's token counter had
    gone backwards (it lost its state: a Redis restart) below a token the store accepted; the
    counter is raised now, so the same work under a new grant is accepted. Nothing of the
    refused grant was written: do it again (a caller is told 503 with `Retry-After`)."""

    retry_after_s = 1.0


class EmbeddingError(StratamemError):
    """The embedder failed to produce vectors."""


class PipelineError(StratamemError):
    """The pipeline backend failed or was asked for something it cannot do."""


class LockLost(PipelineError):
    """A lock the caller held expired or was taken over."""


class LockBusy(PipelineError):
    """A lock stayed held by someone else for longer than the caller would wait."""


class Throttled(StratamemError):
    """A service asked to be called again later (HTTP 429, or 503 with Retry-After).

    `retry_after_s` is how long it asked to wait, or None when it did not say. A pipeline task
    failing with it is retried no sooner than that (`pipeline.worker`).
    """

    retry_after_s: float | None = None


class Postponed(StratamemError):
    """A service is known to be in trouble for now (an LLM endpoint that could not be reached,
    timed out or answered a 5xx, or whose circuit breaker is open).

    Work that needs it is not at fault: a pipeline task failing with it is put back for
    `retry_after_s` without spending one of its attempts (`pipeline.worker`), and the stages
    neither quarantine its input nor record a failure for it.
    """

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unreachable(StratamemError):
    """A service could not be reached, or did not answer within the timeout (client side)."""


class LLMError(StratamemError):
    """An LLM endpoint failed or returned output that could not be validated."""


class LayerError(StratamemError):
    """A memory layer stage (L1, L2, L3) could not complete; nothing of it was written."""


class LayerConflict(LayerError):
    """The state a layer task read (cursor, mark, current version) moved before it committed."""


class ReceiptConflict(LayerConflict):
    """A completion receipt failed authentication, or belongs to another attempt than the one
    being recovered: evidence that does not match is never taken as completion."""


class StageOutputRejected(LayerError):
    """An LLM stage's reply was unusable after a repair round; `raws` keeps every reply text."""

    def __init__(self, message: str, *, raws: tuple[str, ...]) -> None:
        super().__init__(message)
        self.raws = raws


class Unavailable(ConfigError):
    """A feature that was asked for is not available in this build or configuration."""


class AlreadyExists(InvalidInput):
    """The caller asked to create something that exists already; nothing was changed."""


class AccessDenied(StratamemError):
    """The caller may not do this (service edges only)."""


class Unauthenticated(AccessDenied):
    """No credentials, or credentials that match no live key."""


class Forbidden(AccessDenied):
    """Valid credentials that do not grant this operation (a tenant key on an admin route)."""


#: The service's wire vocabulary (`{"error": {"type", "message"}}`), once: each error family's
#: HTTP status and type. The service answers with the first row its error matches
#: (`stratamem.api.errors`); the client raises, for a type, the family of the type's first row
#: (`stratamem.client.errors`), so `conflict` reads back as `MemoryChanged`, the conflict a caller
#: of the client meets (a memory edited meanwhile).
WIRE_ERRORS: tuple[tuple[type[StratamemError], int, str], ...] = (
    (Unauthenticated, 401, "unauthenticated"),
    (Forbidden, 403, "forbidden"),
    (AlreadyExists, 409, "already_exists"),
    (InvalidIdentifier, 422, "invalid_identifier"),
    (InvalidInput, 422, "invalid_input"),
    (NotFound, 404, "not_found"),
    (MemoryChanged, 409, "conflict"),
    (LayerConflict, 409, "conflict"),
    (EmbeddingMismatch, 409, "embedding_mismatch"),
    (FenceResynced, 503, "busy"),
    (StaleFencingToken, 409, "conflict"),
    (Throttled, 429, "rate_limited"),
    (EmbeddingError, 503, "embedding_unavailable"),
    (LLMError, 502, "llm_failed"),
    (LayerError, 502, "layer_failed"),
    (LockBusy, 503, "busy"),
    (PipelineError, 503, "pipeline_unavailable"),
    (StoreError, 500, "store_error"),
    (ConfigError, 500, "config_error"),
    (StratamemError, 500, "internal_error"),
)

#: The types the service's framework answers with (routing, body limits, CORS: no domain error
#: behind them), with their status and the family the client raises for each (None: the
#: status's, `client.errors.ERROR_OF_STATUS`). The first row of a status is its type.
FRAMEWORK_ERRORS: tuple[tuple[int, str, type[StratamemError] | None], ...] = (
    (400, "bad_request", InvalidInput),
    (400, "cors_refused", InvalidInput),
    (401, "unauthenticated", Unauthenticated),
    (404, "not_found", NotFound),
    (405, "method_not_allowed", None),
    (408, "body_too_slow", InvalidInput),
    (413, "body_too_large", InvalidInput),
    (415, "unsupported_media_type", InvalidInput),
    (422, "invalid_input", InvalidInput),
    (429, "rate_limited", Throttled),
)
