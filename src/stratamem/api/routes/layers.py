"""The memory layers of the caller's tenant: L1 memories and their history, L2 scenes, L3
profile, and flushing a session through the layers."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from stratamem.api.deps import MemoryDep, ServicesDep, TenantDep
from stratamem.api.schemas import (
    ERRORS,
    CurrentProfileOut,
    FlushOut,
    Ident,
    MemoryIn,
    MemoryOut,
    MemoryPatch,
    ProfileOut,
    RereadIn,
    RereadOut,
    SceneOut,
)
from stratamem.api.services import Services
from stratamem.api.views import memory_json, profile_json, scene_json, task_json
from stratamem.core import MAX_PAGE, AsyncMemory
from stratamem.domain import MemoryType, Scope, check_ident
from stratamem.layers.executors import flush_in_turn
from stratamem.layers.ledger import totals
from stratamem.layers.model import FlushResult
from stratamem.layers.task_types import FLUSH
from stratamem.pipeline.task import Task

router = APIRouter(prefix="/v1", tags=["layers"], responses=ERRORS)


@router.get("/memories", response_model=list[MemoryOut])
async def list_memories(
    tenant: TenantDep,
    memory: MemoryDep,
    types: Annotated[list[MemoryType] | None, Query(alias="type")] = None,
    sessions: Annotated[list[Ident] | None, Query(alias="session", max_length=100)] = None,
    as_of: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> list[dict[str, Any]]:
    """Current memories (or those valid at `as_of`), newest first."""
    found = await memory.list_memories(
        tenant, types=types, sessions=sessions, as_of=as_of, limit=limit, offset=offset
    )
    return [memory_json(m) for m in found]


@router.post(
    "/memories",
    response_model=MemoryOut,
    status_code=201,
    responses={200: {"model": MemoryOut, "description": "Known already: left as it was."}},
)
async def create_memory(
    body: MemoryIn, tenant: TenantDep, memory: MemoryDep, response: Response
) -> dict[str, Any]:
    """Remember something the caller states directly (mode `manual`); 200 if it was known."""
    record, created = await memory.add_memory(
        tenant, body.content, type=body.type, session=body.session, priority=body.priority,
        metadata=body.metadata, tell_new=True,
    )  # fmt: skip
    if not created:
        response.status_code = 200
    return memory_json(record)


@router.get("/memories/{memory_id}", response_model=MemoryOut)
async def get_memory(memory_id: str, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """One memory with its provenance (`source_turn_ids`) and validity."""
    return memory_json(await memory.get_memory(tenant, memory_id))


@router.patch("/memories/{memory_id}", response_model=MemoryOut)
async def patch_memory(
    memory_id: str, body: MemoryPatch, tenant: TenantDep, memory: MemoryDep
) -> dict[str, Any]:
    """Correct a current memory: a new version (mode `manual`) supersedes it."""
    updated = await memory.update_memory(
        tenant, memory_id, content=body.content, type=body.type, priority=body.priority
    )
    return memory_json(updated)


@router.delete("/memories/{memory_id}", response_model=MemoryOut)
async def delete_memory(memory_id: str, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """Forget a memory: no longer valid from now on (kept in its history, out of recall)."""
    return memory_json(await memory.forget_memory(tenant, memory_id))


@router.get("/memories/{memory_id}/history", response_model=list[MemoryOut])
async def memory_history(
    memory_id: str, tenant: TenantDep, memory: MemoryDep
) -> list[dict[str, Any]]:
    """Every version of a memory (what it superseded and what superseded it), oldest first."""
    return [memory_json(m) for m in await memory.memory_history(tenant, memory_id)]


@router.get("/scenes", response_model=list[SceneOut])
async def list_scenes(tenant: TenantDep, memory: MemoryDep) -> list[dict[str, Any]]:
    """The current scenes, hottest first."""
    return [scene_json(s) for s in await memory.scenes(tenant)]


@router.get("/scenes/{scene_id}/history", response_model=list[SceneOut])
async def scene_history(
    scene_id: str, tenant: TenantDep, memory: MemoryDep
) -> list[dict[str, Any]]:
    """Every version of one scene, oldest first."""
    return [scene_json(s) for s in await memory.scene_history(tenant, scene_id)]


@router.get("/profile", response_model=CurrentProfileOut)
async def profile(tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """The L3 profile (null until the layers have written one)."""
    found = await memory.profile(tenant)
    return {"profile": None if found is None else profile_json(found)}


@router.get("/profile/history", response_model=list[ProfileOut])
async def profile_history(tenant: TenantDep, memory: MemoryDep) -> list[dict[str, Any]]:
    return [profile_json(p) for p in await memory.profile_history(tenant)]


@router.post(
    "/sessions/{session}/flush",
    response_model=FlushOut,
    status_code=202,
    responses={200: {"model": FlushOut, "description": "Ran (with `wait`): what the layers did."}},
)
async def flush(
    session: str,
    tenant: TenantDep,
    services: ServicesDep,
    response: Response,
    wait: Annotated[bool, Query(description="Run the layers now and answer when done.")] = False,
) -> dict[str, Any]:
    """Session ended: queue a flush (L1 until caught up, then L2 and L3): 202. With `wait`, run
    it now, taking its turn with the session's background work (the same locks): 200 with what
    ran; 503 `busy` if a lock stayed held longer than the pipeline's lock wait, or (with
    `Retry-After`) if the pipeline backend lost its state and the store kept refusing the
    flush's grants; 409 `conflict` if a lock it held lapsed meanwhile (a pause past the lock
    TTL) and the store refused the fenced write (what committed before stays; ask again)."""
    check_ident(session, "session")
    if wait:
        result = await _flush_now(services, tenant, session)
        response.status_code = 200
        return {"queued": None, "result": result.to_json()}
    task = Task(FLUSH, tenant, session, {"reason": "api"})
    backend = services.require_pipeline()
    now = services.memory.clock.now()
    await services.memory.request_flush(tenant, session, now)  # owed until a flush completes
    await backend.enqueue(task, now=now)
    return {"queued": task_json(task), "result": None}


async def _flush_now(services: Services, tenant: str, session: str) -> FlushResult:
    memory, backend = services.memory, services.pipeline
    if backend is None:
        return await memory.flush(tenant, session)
    service, settings = memory.layer_service(), services.pipeline_settings
    return await flush_in_turn(service, backend, settings, memory.clock, tenant, session)


@router.post("/sessions/{session}/reextract", response_model=RereadOut)
async def reextract_session(
    session: str, tenant: TenantDep, memory: MemoryDep, body: RereadIn | None = None
) -> dict[str, Any]:
    """Extract again the session's turns a model judged to hold nothing to remember (the turn
    ledger's `nothing_to_remember`), e.g. after the model was changed; answers what each L1
    batch did and the session's outcomes afterwards."""
    check_ident(session, "session")
    return await _reextract(memory, tenant, session, body or RereadIn())


@router.post("/reextract", response_model=RereadOut)
async def reextract_tenant(
    tenant: TenantDep, memory: MemoryDep, body: RereadIn | None = None
) -> dict[str, Any]:
    """As `POST /v1/sessions/{session}/reextract`, for every session of the caller."""
    return await _reextract(memory, tenant, None, body or RereadIn())


async def _reextract(
    memory: AsyncMemory, tenant: str, session: str | None, body: RereadIn
) -> dict[str, Any]:
    results = await memory.layer_service().reread(tenant, session, limit=body.limit)
    assert memory.layers is not None  # layer_service() raised otherwise
    counts = await asyncio.to_thread(memory.layers.outcome_counts, Scope(tenant), session)
    return {"turns": sum(r.counts.get("turns", 0) for r in results),
            "results": [r.to_json() for r in results], "turn_outcomes": totals(counts)}  # fmt: skip
