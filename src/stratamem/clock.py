"""Injected time and identifiers, so retry and timer logic is tested without sleeping."""

from __future__ import annotations

import time
import uuid
from typing import Protocol


class Clock(Protocol):
    """Wall-clock seconds since the epoch, as a float."""

    def now(self) -> float: ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to; for tests and simulations."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        self._now = when


class IdFactory(Protocol):
    def new_id(self) -> str: ...


class UuidFactory:
    def new_id(self) -> str:
        return uuid.uuid4().hex


class CountingIdFactory:
    """Deterministic ids (`prefix-000001` …) for tests."""

    def __init__(self, prefix: str = "id") -> None:
        self._prefix = prefix
        self._n = 0

    def new_id(self) -> str:
        self._n += 1
        return f"{self._prefix}-{self._n:06d}"
