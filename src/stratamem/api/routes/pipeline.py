"""The caller's share of the pipeline: its queued tasks, its dead letters and their requeue.

The queue is shared by every tenant; these routes only ever count or show the caller's tasks.
Operators see the whole queue at `/v1/admin/pipeline`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query

from stratamem.api.deps import AdminDep, ServicesDep, TenantDep
from stratamem.api.schemas import ERRORS, DeadLetterOut, PipelineOut, TaskOut
from stratamem.api.services import Services
from stratamem.api.views import dead_letter_json, task_json
from stratamem.domain import Scope
from stratamem.errors import NotFound
from stratamem.layers.ledger import totals
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.errors import DeadLetterNotFound
from stratamem.pipeline.scheduler import read_snapshot
from stratamem.pipeline.status import worker_statuses
from stratamem.pipeline.task import DeadLetter, Task

SCAN_LIMIT = 10_000
DEFAULT_PAGE, MAX_PAGE = 100, 1000
AFTER = "The id of the last dead letter of the previous page (a cursor)."
router = APIRouter(prefix="/v1", tags=["pipeline"], responses=ERRORS)


@router.get("/pipeline", response_model=PipelineOut)
async def pipeline_status(tenant: TenantDep, services: ServicesDep) -> dict[str, Any]:
    """How much background work of the caller is queued, dead, or not yet started."""
    backend = services.require_pipeline()
    tasks = await backend.list_tasks(limit=SCAN_LIMIT)
    dead = await backend.count_dead(tenant=tenant)
    pending = await asyncio.to_thread(services.layers.pending_turns, Scope(tenant))
    sessions = await asyncio.to_thread(services.layers.outcome_counts, Scope(tenant))
    queued = sum(1 for t in tasks if t.tenant == tenant)
    return {"queued": queued, "dead_letters": dead, "pending_turns": pending,
            "turn_outcomes": totals(sessions), "sessions": sessions}  # fmt: skip


@router.get("/dead-letters", response_model=list[DeadLetterOut])
async def list_dead_letters(
    tenant: TenantDep,
    services: ServicesDep,
    after: Annotated[str | None, Query(max_length=100, description=AFTER)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
) -> list[dict[str, Any]]:
    """The caller's tasks that failed every retry, oldest first, a page at a time."""
    page = await dead_page(services.require_pipeline(), limit, after, tenant)
    return [dead_letter_json(d) for d in page]


@router.post("/dead-letters/{dead_id}/requeue", response_model=TaskOut)
async def requeue_dead_letter(
    dead_id: str, tenant: TenantDep, services: ServicesDep
) -> dict[str, Any]:
    """Put one of the caller's dead letters back on the queue (attempts reset)."""
    return task_json(await requeue(services, dead_id, tenant))


def _where(tenant: str | None) -> str:
    return "" if tenant is None else f" in tenant {tenant!r}"


async def dead_page(
    backend: PipelineBackend, limit: int, after: str | None, tenant: str | None
) -> list[DeadLetter]:
    """A page of `tenant`'s dead letters (every tenant's when None); `NotFound` for `after`."""
    try:
        return await backend.list_dead(limit=limit, tenant=tenant, after=after)
    except DeadLetterNotFound as exc:
        raise NotFound(f"no dead letter {after!r}{_where(tenant)}") from exc


async def requeue(services: Services, dead_id: str, tenant: str | None) -> Task:
    """Put a dead letter of `tenant` (of any tenant when None) back on the queue."""
    backend, now = services.require_pipeline(), services.memory.clock.now()
    try:
        return await backend.requeue_dead(dead_id, now=now, tenant=tenant)
    except DeadLetterNotFound as exc:
        raise NotFound(f"no dead letter {dead_id!r}{_where(tenant)}") from exc


@router.get("/admin/pipeline")
async def admin_pipeline(_: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """Queue depth of every tenant, the status each worker last published, with its state
    (`running`, `stopped`, or `unresponsive` when a running worker stopped publishing), and the
    backlog scheduler's last snapshot (counters, backlog per kind; null before its first pass)."""
    backend = services.require_pipeline()
    depth = (await backend.depth()).as_dict()
    now = services.memory.clock.now()
    workers = await worker_statuses(backend, now, services.pipeline_settings)
    return {"depth": depth, "workers": workers, "scheduler": await read_snapshot(backend)}
