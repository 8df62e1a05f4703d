"""Errors of the pipeline, all under `stratamem.errors.PipelineError`."""

from __future__ import annotations

from stratamem.errors import PipelineError


class BackendUnavailable(PipelineError):
    """The backend (SQLite file, Redis server) failed to answer; the operation may be retried."""


class UnknownTaskType(PipelineError):
    """No executor is registered for a task's type."""


class DeadLetterNotFound(PipelineError, LookupError):
    """The named dead-letter record does not exist (already requeued or purged)."""
