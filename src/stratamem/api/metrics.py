"""Prometheus metrics in the text exposition format (version 0.0.4), without a client library.

Labels never name a tenant, a session or a record: only method (one of `METHODS`), route
template and status, so the series are as few as the routes, however long the process runs.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

RequestKey = tuple[str, str, int]
#: Methods counted by name; any other (a client may send any token) is counted as `OTHER`.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass
class _Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS_S))
    count: int = 0
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        for i, bound in enumerate(DURATION_BUCKETS_S):
            if seconds <= bound:
                self.buckets[i] += 1


class Metrics:
    """Counters of the service; `render` adds gauges read from the store at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[RequestKey, int] = defaultdict(int)
        self._durations: dict[tuple[str, str], _Histogram] = defaultdict(_Histogram)
        self._events: dict[str, int] = defaultdict(int)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "OTHER"
        with self._lock:
            self._requests[(method, route, status)] += 1
            self._durations[(method, route)].observe(seconds)

    def count(self, event: str, by: int = 1) -> None:
        """Add to a named event counter, e.g. `captured_messages`."""
        with self._lock:
            self._events[event] += by

    def render(self, gauges: Mapping[str, float]) -> str:
        with self._lock:
            lines = [*self._request_lines(), *self._duration_lines(), *self._event_lines()]
        lines.extend(_gauge_lines(gauges))
        return "\n".join(lines) + "\n"

    def _request_lines(self) -> Iterable[str]:
        yield "# HELP stratamem_http_requests_total HTTP requests by method, route and status."
        yield "# TYPE stratamem_http_requests_total counter"
        for (method, route, status), n in sorted(self._requests.items()):
            labels = label_set(method=method, route=route, status=str(status))
            yield f"stratamem_http_requests_total{labels} {n}"

    def _duration_lines(self) -> Iterable[str]:
        name = "stratamem_http_request_duration_seconds"
        yield f"# HELP {name} Time to answer an HTTP request."
        yield f"# TYPE {name} histogram"
        for (method, route), hist in sorted(self._durations.items()):
            for bound, n in zip(DURATION_BUCKETS_S, hist.buckets, strict=True):
                yield f"{name}_bucket{label_set(method=method, route=route, le=str(bound))} {n}"
            yield f"{name}_bucket{label_set(method=method, route=route, le='+Inf')} {hist.count}"
            yield f"{name}_sum{label_set(method=method, route=route)} {hist.total_s:.6f}"
            yield f"{name}_count{label_set(method=method, route=route)} {hist.count}"

    def _event_lines(self) -> Iterable[str]:
        for event, n in sorted(self._events.items()):
            yield f"# TYPE stratamem_{event}_total counter"
            yield f"stratamem_{event}_total {n}"


def _gauge_lines(gauges: Mapping[str, float]) -> Iterable[str]:
    for name, value in sorted(gauges.items()):
        yield f"# TYPE stratamem_{name} gauge"
        yield f"stratamem_{name} {value:g}"


def label_set(**labels: str) -> str:
    """`{name="value",…}`, the values escaped."""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def store_gauges(stats: Mapping[str, object], tenants: int) -> dict[str, float]:
    """Gauges from `AsyncMemory.stats()` over every tenant (totals only)."""
    gauges: dict[str, float] = {"tenants": float(tenants)}
    for layer, name in (("L0", "turns"), ("L1", "memories")):
        counts = stats.get(layer)
        if isinstance(counts, Mapping):
            gauges[name] = float(counts.get("records", 0))
            gauges[f"{name}_pending_embeddings"] = float(counts.get("pending_embeddings", 0))
    return gauges
