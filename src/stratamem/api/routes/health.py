"""Liveness and Prometheus metrics: no key needed, and nothing tenant-specific in either."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from stratamem.api.deps import ServicesDep
from stratamem.api.metrics import CONTENT_TYPE, store_gauges
from stratamem.api.schemas import HealthOut
from stratamem.api.services import Services
from stratamem.api.views import package_version

router = APIRouter(tags=["service"])


@router.get("/v1/health", response_model=HealthOut)
async def health(services: ServicesDep) -> HealthOut:
    """`ok` when the store answers."""
    await asyncio.to_thread(services.tenants.count_tenants)
    return HealthOut(status="ok", version=package_version())


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(services: ServicesDep) -> PlainTextResponse:
    """Prometheus text format: request counts and durations, store totals."""
    text = services.metrics.render(await _gauges(services))
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


async def _gauges(services: Services) -> dict[str, float]:
    stats = await services.memory.stats()
    tenants = await asyncio.to_thread(services.tenants.count_tenants)
    gauges = store_gauges(stats, tenants)
    if services.pipeline is not None:
        depth = (await services.pipeline.depth()).as_dict()
        gauges.update({f"pipeline_{name}": float(n) for name, n in depth.items()})
    return gauges
