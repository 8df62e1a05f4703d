"""The process's logging, for the commands that run for long (`serve`, `mcp`, `worker`).

One handler on the root logger, writing plain lines to stderr, set up before anything else:
- it imports nothing when it writes (a handler that imports at its first traceback fails when
  the process is out of file descriptors, which is exactly when its line matters; the MCP SDK
  installs such a handler on the root logger unless one is there already);
- every URL in a line is shown as scheme://host[:port] (`httpretry.redact_url`): a log leaves
  the process, and a URL may carry a password, a key in its path or query;
- an expected failure (an endpoint or a backend down, a stage's reply refused, a lock busy, a
  limit reached) is one WARNING line with its chain of causes, wherever it is logged and at
  whatever level; anything else keeps its level and its traceback.
"""

from __future__ import annotations

import logging
import sys
from types import TracebackType

from stratamem.errors import (
    EmbeddingError,
    LayerError,
    LLMError,
    PipelineError,
    Postponed,
    Throttled,
    Unreachable,
)
from stratamem.httpretry import redact_urls

EXPECTED: tuple[type[BaseException], ...] = (
    LLMError, LayerError, PipelineError, EmbeddingError, Postponed, Throttled, Unreachable,
)  # fmt: skip
"""Failures of the world outside the process, not of its code: they are met, retried or
postponed, and a traceback would only say where they were noticed."""

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_CAUSES = 5

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def describe(exc: BaseException) -> str:
    """`exc` and the causes it was raised from, in one line: `Type: message <- Cause: …`."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < MAX_CAUSES:
        text = str(seen).strip().replace("\n", " ")
        parts.append(f"{type(seen).__name__}: {text}" if text else type(seen).__name__)
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return " <- ".join(parts)


class ExpectedInOneLine(logging.Filter):
    """A record carrying an expected failure (`EXPECTED`) becomes one WARNING line naming it
    and its causes, instead of its level and a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = _exception(record.exc_info)
        if exc is None or not isinstance(exc, EXPECTED):
            return True
        record.msg, record.args = f"{record.getMessage()}: {describe(exc)}", None
        record.exc_info, record.exc_text = None, None
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _exception(exc_info: object) -> BaseException | None:
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        found = exc_info[1]
        return found if isinstance(found, BaseException) else None
    return None


class RedactingFormatter(logging.Formatter):
    """Plain lines, every URL in them (message, exception, traceback) redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls(super().format(record))


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The process's one handler: plain lines on the stderr it had when logging was set up."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)


def configure(level: int = logging.INFO) -> None:
    """Make the root logger's only handler ours (idempotent); quiet the HTTP client's
    per-request lines (every call of an endpoint would be one)."""
    root = logging.getLogger()
    if any(isinstance(h, StderrHandler) for h in root.handlers):
        return
    handler = StderrHandler()
    handler.setFormatter(RedactingFormatter(FORMAT))
    handler.addFilter(ExpectedInOneLine())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
