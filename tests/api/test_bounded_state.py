"""In-process state of the API keyed by callers' input stays bounded in a long-running server:
many distinct tenants (or methods) pass through, and what is kept is what is still in use."""

from __future__ import annotations

from stratamem.api.limits import PRUNE_AT, TokenBuckets
from stratamem.api.metrics import Metrics


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_buckets_forget_tenants_whose_bucket_has_refilled() -> None:
    clock = Ticks()
    buckets = TokenBuckets(rate=10.0, burst=20.0, monotonic=clock)
    for i in range(50 * PRUNE_AT):
        clock.now += 0.01  # 100 new tenants a second; a bucket refills in 2 s
        assert buckets.take(f"tenant-{i}", 1) == 0.0
        assert len(buckets) <= 2 * PRUNE_AT


def test_a_tenant_still_sending_keeps_its_bucket_through_the_pruning() -> None:
    clock = Ticks()
    buckets = TokenBuckets(rate=1.0, burst=2.0, monotonic=clock)
    for i in range(10 * PRUNE_AT):
        clock.now += 0.01
        buckets.take(f"passer-{i}", 1)  # full again a second later: forgotten then
        if i % 100 == 0:
            buckets.take("busy", 1)  # spends what it gains: never full
        assert len(buckets) <= 2 * PRUNE_AT
    assert buckets.take("busy", 2) > 0.0  # a forgotten bucket would start full


def test_metrics_keep_one_series_for_methods_nobody_routes() -> None:
    metrics = Metrics()
    for i in range(5_000):
        metrics.observe_request(f"M{i}", "unmatched", 405, 0.001)
    metrics.observe_request("GET", "/v1/health", 200, 0.001)
    series = [
        line for line in metrics.render({}).splitlines()
        if line.startswith("stratamem_http_requests_total{")
    ]  # fmt: skip
    assert len(series) == 2
    assert 'method="OTHER"' in series[0] or 'method="OTHER"' in series[1]
