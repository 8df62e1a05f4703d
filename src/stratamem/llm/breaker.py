"""A circuit breaker per endpoint, so a dead or stuck server does not make every queued task
wait out its timeout and burn its retries.

Closed: calls go through; `failures` consecutive calls in endpoint trouble (transport failures,
timeouts, and answers 500, 502, 504 or a 503 that does not ask to wait) open it. Open: calls
fail at once with `LLMCircuitOpen` (no request sent) until `cooldown_s` has passed. Then
half-open: one call at a time is let through as a probe; its success closes the breaker, its
failure opens it for another cool-down. Any other answer from the server (a 4xx, a reply that
cannot be used) counts as a success: the server is up. State lives in the process (one breaker
per client, keyed by endpoint URL); time comes from the injected clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

from stratamem.clock import Clock
from stratamem.httpretry import redact_url
from stratamem.llm.errors import LLMCircuitOpen


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(slots=True)
class _Endpoint:
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False


class CircuitBreaker:
    """Breakers of every endpoint a client calls. Thread-safe."""

    def __init__(self, failures: int, cooldown_s: float, clock: Clock) -> None:
        self.failures = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._endpoints: dict[str, _Endpoint] = {}
        self._lock = threading.Lock()

    def state(self, endpoint: str) -> BreakerState:
        with self._lock:
            return self._state(self._endpoints.get(endpoint) or _Endpoint())

    def admit(self, endpoint: str) -> bool:
        """Let one call through, or raise `LLMCircuitOpen`. True when the call is the probe of a
        half-open breaker (the caller then reports its outcome, or `abandon`s it)."""
        with self._lock:
            current = self._endpoints.setdefault(endpoint, _Endpoint())
            state = self._state(current)
            if state is BreakerState.CLOSED:
                return False
            if state is BreakerState.HALF_OPEN and not current.probing:
                current.probing = True
                return True
            wait_s = self._wait_s(current)
        raise LLMCircuitOpen(
            f"the circuit breaker of {redact_url(endpoint)} is open after {self.failures}"
            f" consecutive calls in trouble; next try in {wait_s:.0f} s",
            retry_after_s=wait_s,
        )

    def succeeded(self, endpoint: str) -> None:
        with self._lock:
            self._endpoints[endpoint] = _Endpoint()

    def failed(self, endpoint: str) -> None:
        with self._lock:
            current = self._endpoints.setdefault(endpoint, _Endpoint())
            current.failures += 1
            if current.probing or current.failures >= self.failures:
                current.opened_at = self._clock.now()
            current.probing = False

    def abandon(self, endpoint: str) -> None:
        """A probe that ended without an outcome (cancelled): the next call may probe."""
        with self._lock:
            current = self._endpoints.get(endpoint)
            if current is not None:
                current.probing = False

    def _state(self, current: _Endpoint) -> BreakerState:
        if current.opened_at is None:
            return BreakerState.CLOSED
        if self._clock.now() - current.opened_at < self.cooldown_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def _wait_s(self, current: _Endpoint) -> float:
        if current.opened_at is None:
            return 0.0
        left = current.opened_at + self.cooldown_s - self._clock.now()
        return max(left, 1.0)  # half-open with its probe in flight: come back shortly
