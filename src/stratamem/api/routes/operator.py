"""The operator's side of the inspector (admin key): every tenant's dead letters, requeued or
purged, and this process's LLM calls, tokens and outcomes per stage."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from stratamem.api.deps import AdminDep, ServicesDep
from stratamem.api.llm_metrics import usage_json
from stratamem.api.routes.pipeline import AFTER, MAX_PAGE, dead_page, requeue
from stratamem.api.schemas import ERRORS
from stratamem.api.views import dead_letter_json, task_json
from stratamem.errors import NotFound

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ERRORS)


@router.get("/dead-letters")
async def list_dead_letters(
    _: AdminDep,
    services: ServicesDep,
    after: Annotated[str | None, Query(max_length=100, description=AFTER)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> list[dict[str, Any]]:
    """Every tenant's dead letters, oldest first, each with its tenant, a page at a time."""
    page = await dead_page(services.require_pipeline(), limit, after, None)
    return [{**dead_letter_json(d), "tenant": d.task.tenant} for d in page]


@router.post("/dead-letters/{dead_id}/requeue")
async def requeue_dead_letter(dead_id: str, _: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """Put a dead letter of any tenant back on the queue (attempts reset)."""
    task = await requeue(services, dead_id, None)
    return {**task_json(task), "tenant": task.tenant}


@router.delete("/dead-letters/{dead_id}")
async def purge_dead_letter(dead_id: str, _: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """Delete a dead letter for good: its task is not run again (the work it stood for stays
    owed in the store, where the backlog scheduler finds it)."""
    purged = await services.require_pipeline().purge_dead([dead_id])
    if not purged:
        raise NotFound(f"no dead letter {dead_id!r}")
    return {"purged": purged}


@router.get("/llm")
async def llm_usage(_: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """This process's LLM calls, tokens and outcomes per stage since it started (the same
    counts as `/metrics`); `mode` is `offline` when no endpoint is configured. Workers in
    other processes publish theirs in `GET /v1/admin/pipeline`."""
    mode = "offline" if services.memory.llm is None else "llm"
    return {"mode": mode, "stages": usage_json(services.llm_usage)}
