"""Errors of the pipeline, all under `stratamem.errors.PipelineError`."""

from __future__ import annotations

from stratamem.errors import InvalidInput, NotFound, PipelineError


class BackendUnavailable(PipelineError):
    """The backend (SQLite file, Redis server) failed to answer; the operation may be retried."""


class UnknownTaskType(PipelineError, InvalidInput):
    """A task's type is not one the pipeline knows (refused at enqueue), or no executor is
    registered for it in this worker."""


class DeadLetterNotFound(PipelineError, NotFound):
    """The named dead-letter record does not exist (already requeued or purged)."""


class DeliveryLost(PipelineError):
    """The delivery is no longer pending for its consumer (reclaimed, or acknowledged)."""


class RetryLater(PipelineError):
    """Raised by an executor to be retried after `delay_s` instead of the default backoff
    (e.g. an LLM endpoint answered 429 with Retry-After). Counts as one attempt."""

    def __init__(self, delay_s: float, reason: str = "") -> None:
        super().__init__(reason or f"retry requested in {delay_s} s")
        self.delay_s = max(0.0, delay_s)
