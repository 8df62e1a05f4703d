"""Liveness, readiness and Prometheus metrics: no key needed, and nothing tenant-specific."""

from __future__ import annotations

import asyncio
import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from stratamem.api.deps import ServicesDep
from stratamem.api.llm_metrics import usage_lines
from stratamem.api.metrics import CONTENT_TYPE, store_gauges
from stratamem.api.schemas import ErrorDetail, ErrorOut, HealthOut
from stratamem.api.services import Services
from stratamem.api.views import package_version
from stratamem.pipeline.scheduler import read_snapshot, snapshot_gauges

router = APIRouter(tags=["service"])


@router.get("/v1/health", response_model=HealthOut)
async def health(services: ServicesDep) -> HealthOut:
    """`ok` when the store answers; `ready` once the embedding model is loaded."""
    await asyncio.to_thread(services.tenants.count_tenants)
    ready = services.memory.embedder_ready
    return HealthOut(status="ok", version=package_version(), ready=ready)


@router.get("/v1/ready", response_model=HealthOut, responses={503: {"model": ErrorOut}})
async def ready(services: ServicesDep) -> HealthOut | JSONResponse:
    """200 once the service can answer at full speed (the embedding model loaded) and while
    its pipeline work runs, else 503 (a worker or scheduler of this process that stopped by an
    error makes it 503 for good: the process must be restarted)."""
    if services.stopped is not None:
        return _not_ready(services.stopped)
    if not services.memory.embedder_ready:
        return _not_ready("the embedding model is still loading")
    return await health(services)


def _not_ready(message: str) -> JSONResponse:
    detail = ErrorDetail(type="not_ready", message=message)
    return JSONResponse(ErrorOut(error=detail).model_dump(), status_code=503)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(services: ServicesDep) -> PlainTextResponse:
    """Prometheus text format: request counts and durations, store totals, LLM calls, tokens
    and outcomes per stage."""
    text = services.metrics.render(await _gauges(services))
    text += "\n".join(usage_lines(services.llm_usage)) + "\n"
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


async def _gauges(services: Services) -> dict[str, float]:
    stats = await services.memory.stats()
    tenants = await asyncio.to_thread(services.tenants.count_tenants)
    gauges = store_gauges(stats, tenants)
    gauges["api_process_id"] = float(os.getpid())  # which of `serve --processes` answered
    if services.pipeline is not None:
        depth = (await services.pipeline.depth()).as_dict()
        gauges.update({f"pipeline_{name}": float(n) for name, n in depth.items()})
        gauges.update(snapshot_gauges(await read_snapshot(services.pipeline)))
    return gauges
