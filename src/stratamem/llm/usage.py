"""Calls, tokens and outcomes per stage, counted by the client, for metrics and reports."""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from stratamem.errors import LLMError
from stratamem.llm.errors import LLMOutputInvalid, LLMReplyTruncated

OUTCOMES = ("accepted", "repaired", "refused", "truncated", "failed")
"""How a stage call ended: a reply accepted at once, or after a repair round; no usable reply
after the repair round; a reply cut off by the length limit; no reply (transport, HTTP)."""


@dataclass(slots=True)
class _Counts:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(slots=True)
class _OpenCall:
    repaired: bool = False


_OPEN: ContextVar[_OpenCall | None] = ContextVar("stratamem_llm_stage_call", default=None)


class UsageMeter:
    """Counts calls (HTTP requests sent, retries included) and tokens per stage, and the outcome
    of each stage call (`OUTCOMES`). Thread-safe."""

    def __init__(self) -> None:
        self._counts: defaultdict[str, _Counts] = defaultdict(_Counts)
        self._outcomes: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._lock = threading.Lock()

    def count_call(self, stage: str) -> None:
        with self._lock:
            self._counts[stage].calls += 1

    def count_tokens(self, stage: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            counts = self._counts[stage]
            counts.prompt_tokens += prompt_tokens
            counts.completion_tokens += completion_tokens

    def count_outcome(self, stage: str, outcome: str) -> None:
        with self._lock:
            counts = self._outcomes[stage]
            counts[outcome] = counts.get(outcome, 0) + 1

    @contextlib.contextmanager
    def stage_call(self, stage: str) -> Iterator[None]:
        """One stage call, however many requests and repair rounds it takes: its outcome is
        counted once, when the outermost `stage_call` ends (a stage's own checks wrap the
        client's, and a repair at either level makes the call `repaired`)."""
        if _OPEN.get() is not None:
            yield
            return
        state = _OpenCall()
        token = _OPEN.set(state)
        try:
            yield
        except LLMReplyTruncated:
            self.count_outcome(stage, "truncated")
            raise
        except LLMOutputInvalid:
            self.count_outcome(stage, "refused")
            raise
        except LLMError:
            self.count_outcome(stage, "failed")
            raise
        else:
            self.count_outcome(stage, "repaired" if state.repaired else "accepted")
        finally:
            _OPEN.reset(token)

    @staticmethod
    def note_repair() -> None:
        """The open stage call needed a repair round."""
        state = _OPEN.get()
        if state is not None:
            state.repaired = True

    def snapshot(self) -> dict[str, dict[str, int]]:
        """`{stage: {"calls": n, "prompt_tokens": n, "completion_tokens": n}}`, a copy."""
        with self._lock:
            return {
                stage: {
                    "calls": c.calls,
                    "prompt_tokens": c.prompt_tokens,
                    "completion_tokens": c.completion_tokens,
                }
                for stage, c in sorted(self._counts.items())
            }

    def outcomes(self) -> dict[str, dict[str, int]]:
        """`{stage: {outcome: n}}` for every outcome of `OUTCOMES` (zeros included), a copy."""
        with self._lock:
            return {
                stage: {name: counts.get(name, 0) for name in OUTCOMES}
                for stage, counts in sorted(self._outcomes.items())
            }

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._outcomes.clear()
