"""Injected waiting for tests: record the delays code asks for instead of sleeping."""

from __future__ import annotations


class RecordingSleep:
    """An async `sleep(seconds)` that records each requested delay and returns at once.

    Pass it where stratamem takes `sleep=` (the LLM client, the OpenAI embedder), then assert
    on `delays`: a 30-second Retry-After is tested without waiting 30 seconds.
    """

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)

    @property
    def total_s(self) -> float:
        return sum(self.delays)
