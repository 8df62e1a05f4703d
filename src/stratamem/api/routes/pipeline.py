"""The caller's share of the pipeline: its queued tasks, its dead letters and their requeue.

The queue is shared by every tenant; these routes only ever count or show the caller's tasks.
Operators see the whole queue at `/v1/admin/pipeline`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from stratamem.api.deps import AdminDep, ServicesDep, TenantDep
from stratamem.api.schemas import ERRORS, DeadLetterOut, PipelineOut, TaskOut
from stratamem.api.services import Services
from stratamem.api.views import dead_letter_json, task_json
from stratamem.domain import Scope
from stratamem.errors import NotFound
from stratamem.pipeline.status import worker_statuses
from stratamem.pipeline.task import DeadLetter

SCAN_LIMIT = 10_000
router = APIRouter(prefix="/v1", tags=["pipeline"], responses=ERRORS)


async def _dead_of(services: Services, tenant: str) -> list[DeadLetter]:
    dead = await services.require_pipeline().list_dead(limit=SCAN_LIMIT)
    return [d for d in dead if d.task.tenant == tenant]


@router.get("/pipeline", response_model=PipelineOut)
async def pipeline_status(tenant: TenantDep, services: ServicesDep) -> dict[str, Any]:
    """How much background work of the caller is queued, dead, or not yet started."""
    tasks = await services.require_pipeline().list_tasks(limit=SCAN_LIMIT)
    dead = await _dead_of(services, tenant)
    sessions = await asyncio.to_thread(services.memory.store.list_sessions, Scope(tenant))
    pending = 0
    for session in sessions:
        state = await asyncio.to_thread(services.layers.session_state, Scope(tenant), session)
        pending += state.pending_turns
    queued = sum(1 for t in tasks if t.tenant == tenant)
    return {"queued": queued, "dead_letters": len(dead), "pending_turns": pending}


@router.get("/dead-letters", response_model=list[DeadLetterOut])
async def list_dead_letters(tenant: TenantDep, services: ServicesDep) -> list[dict[str, Any]]:
    """The caller's tasks that failed every retry, oldest first."""
    return [dead_letter_json(d) for d in await _dead_of(services, tenant)]


@router.post("/dead-letters/{dead_id}/requeue", response_model=TaskOut)
async def requeue_dead_letter(
    dead_id: str, tenant: TenantDep, services: ServicesDep
) -> dict[str, Any]:
    """Put one of the caller's dead letters back on the queue (attempts reset)."""
    if not any(d.id == dead_id for d in await _dead_of(services, tenant)):
        raise NotFound(f"no dead letter {dead_id!r} in tenant {tenant!r}")
    backend = services.require_pipeline()
    return task_json(await backend.requeue_dead(dead_id, now=services.memory.clock.now()))


@router.get("/admin/pipeline")
async def admin_pipeline(_: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """Queue depth of every tenant, and the status each worker last published, with its state
    (`running`, `stopped`, or `unresponsive` when a running worker stopped publishing)."""
    backend = services.require_pipeline()
    depth = (await backend.depth()).as_dict()
    now = services.memory.clock.now()
    workers = await worker_statuses(backend, now, services.pipeline_settings)
    return {"depth": depth, "workers": workers}
