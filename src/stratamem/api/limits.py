"""Per-tenant limits of the service, so that one tenant cannot starve the others.

- requests per second and request-body bytes per second: a token bucket per tenant each
  (`burst` is the bucket's size: a quiet tenant may send that much at once);
- pending embeddings: a capture is refused while the tenant has more records waiting for a
  vector than the limit (the background catches up, then captures are taken again).
Each refusal is a `TenantThrottled` (HTTP 429 with `Retry-After`: the seconds after which the
same request would pass). A limit of 0 turns that limit off. Time is the injected monotonic clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from stratamem.errors import Throttled

#: Seconds a capture refused for pending embeddings is told to wait.
PENDING_RETRY_AFTER_S = 5.0


class TenantThrottled(Throttled):
    """A tenant went over one of its limits; `retry_after_s` says when to try again."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass
class _Bucket:
    tokens: float
    at: float


#: Buckets kept before the full ones are dropped (then twice what is left, at least this).
PRUNE_AT = 1_024


class TokenBuckets:
    """One token bucket per key: `rate` tokens a second, at most `burst` kept.

    A bucket that has refilled to `burst` is the same as no bucket, so full ones are dropped
    whenever the count doubles: the buckets kept are those of keys seen in the last
    `burst / rate` seconds, however many keys came and went (a tenant per request, for years).
    """

    def __init__(self, rate: float, burst: float, monotonic: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self._monotonic = monotonic
        self._buckets: dict[str, _Bucket] = {}
        self._prune_at = PRUNE_AT
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str, cost: float) -> float:
        """Take `cost` tokens and return 0.0, or take none and return the seconds until there
        are enough (a cost over `burst` is charged as `burst`, so it can pass when full)."""
        cost = min(cost, self.burst)
        now = self._monotonic()
        with self._lock:
            if len(self._buckets) >= self._prune_at:
                self._drop_full(now)
            bucket = self._buckets.get(key) or _Bucket(self.burst, now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            self._buckets[key] = bucket
            if bucket.tokens >= cost:
                bucket.tokens -= cost
                return 0.0
            return (cost - bucket.tokens) / self.rate

    def _drop_full(self, now: float) -> None:
        """Forget the buckets that are full by `now` (their keys start full again anyway)."""
        rate, burst = self.rate, self.burst
        self._buckets = {
            k: b for k, b in self._buckets.items() if b.tokens + (now - b.at) * rate < burst
        }
        self._prune_at = max(PRUNE_AT, 2 * len(self._buckets))


class TenantLimits:
    """The limits of every tenant of one process (see the module's notes)."""

    def __init__(
        self,
        *,
        requests_per_s: float,
        request_burst: int,
        bytes_per_s: int,
        byte_burst: int,
        pending_embeddings: int,
        monotonic: Callable[[], float],
    ) -> None:
        self.pending_embeddings = pending_embeddings
        self._requests = (
            TokenBuckets(requests_per_s, request_burst, monotonic) if requests_per_s else None
        )
        self._bytes = TokenBuckets(bytes_per_s, byte_burst, monotonic) if bytes_per_s else None

    def admit(self, tenant: str, body_bytes: int) -> None:
        """Count one request of `body_bytes`; `TenantThrottled` when over a limit."""
        if self._requests is not None:
            wait = self._requests.take(tenant, 1)
            if wait:
                raise _throttled(f"more than {self._requests.rate:g} requests a second", wait)
        if self._bytes is not None and body_bytes > 0:
            wait = self._bytes.take(tenant, body_bytes)
            if wait:
                raise _throttled(f"more than {self._bytes.rate:g} body bytes a second", wait)

    def check_pending(self, pending: int) -> None:
        """Refuse more captures while `pending` records of the tenant wait for a vector."""
        if self.pending_embeddings and pending >= self.pending_embeddings:
            raise TenantThrottled(
                f"{pending} of this tenant's records are waiting to be embedded (the limit is"
                f" {self.pending_embeddings}): capture again when they are",
                PENDING_RETRY_AFTER_S,
            )


def _throttled(what: str, wait_s: float) -> TenantThrottled:
    return TenantThrottled(f"this tenant sends {what}: wait and try again", wait_s)

