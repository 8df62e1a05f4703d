"""Token usage per stage, counted by the client, for the pipeline's metrics."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass


@dataclass(slots=True)
class _Counts:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class UsageMeter:
    """Counts calls (HTTP requests sent, retries included) and tokens per stage. Thread-safe."""

    def __init__(self) -> None:
        self._counts: defaultdict[str, _Counts] = defaultdict(_Counts)
        self._lock = threading.Lock()

    def count_call(self, stage: str) -> None:
        with self._lock:
            self._counts[stage].calls += 1

    def count_tokens(self, stage: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            counts = self._counts[stage]
            counts.prompt_tokens += prompt_tokens
            counts.completion_tokens += completion_tokens

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

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
