"""The Prometheus text format the service writes without a client library."""

from __future__ import annotations

import httpx

from stratamem.api.metrics import Metrics, store_gauges


def test_histogram_buckets_are_cumulative_and_labels_escaped() -> None:
    metrics = Metrics()
    metrics.observe_request("GET", '/v1/"odd"\\path', 200, 0.02)
    metrics.observe_request("GET", '/v1/"odd"\\path', 200, 3.0)
    text = metrics.render({"turns": 5})
    labels = 'method="GET",route="/v1/\\"odd\\"\\\\path"'
    assert f'stratamem_http_request_duration_seconds_bucket{{{labels},le="0.01"}} 0' in text
    assert f'stratamem_http_request_duration_seconds_bucket{{{labels},le="0.025"}} 1' in text
    assert f'stratamem_http_request_duration_seconds_bucket{{{labels},le="5.0"}} 2' in text
    assert f'stratamem_http_request_duration_seconds_bucket{{{labels},le="+Inf"}} 2' in text
    assert f"stratamem_http_request_duration_seconds_count{{{labels}}} 2" in text
    assert "# TYPE stratamem_turns gauge\nstratamem_turns 5\n" in text


def test_store_gauges_are_totals() -> None:
    stats = {"L0": {"records": 3, "pending_embeddings": 1}, "L1": {"records": 2,
             "pending_embeddings": 0}, "tenants": 9}  # fmt: skip
    assert store_gauges(stats, tenants=2) == {
        "tenants": 2.0, "turns": 3.0, "turns_pending_embeddings": 1.0,
        "memories": 2.0, "memories_pending_embeddings": 0.0,
    }  # fmt: skip


async def test_requests_are_labelled_by_route_template(client: httpx.AsyncClient) -> None:
    await client.get("/openapi.json")
    await client.get("/v1/memories/m_1", headers={"Authorization": "Bearer nope"})
    await client.get("/no/such/path")
    text = (await client.get("/metrics")).text
    counter = "stratamem_http_requests_total"
    assert f'{counter}{{method="GET",route="/openapi.json",status="200"}} 1' in text
    assert 'route="/v1/memories/{memory_id}",status="401"' in text
    assert 'route="unmatched",status="404"' in text
