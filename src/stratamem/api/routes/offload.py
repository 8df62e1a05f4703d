"""Context offload for the caller's sessions: tool results in, compacted contexts and exact
read-back out. The stages (summaries, task judgment, diagrams) run on the pipeline."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from stratamem.api.deps import ServicesDep, TenantDep
from stratamem.api.schemas import ERRORS, CompactIn, ToolResultsIn, UserMessageIn

router = APIRouter(prefix="/v1/offload", tags=["offload"], responses=ERRORS)


@router.post("/sessions/{session}/tool-results")
async def ingest(
    session: str, body: ToolResultsIn, tenant: TenantDep, services: ServicesDep
) -> dict[str, Any]:
    """Append finished tool calls with their results (idempotent by `call_id`)."""
    pairs = [p.model_dump(exclude_none=True) for p in body.pairs]
    result = await services.require_offload().ingest(tenant, session, pairs)
    return dict(result.to_json())


@router.post("/sessions/{session}/user-messages")
async def user_message(
    session: str, body: UserMessageIn, tenant: TenantDep, services: ServicesDep
) -> dict[str, Any]:
    """Record a user message: the task judgment decides whether a new task starts here."""
    message_id = await services.require_offload().user_message(
        tenant, session, body.text, message_id=body.id, timestamp=body.timestamp
    )
    return {"id": message_id}


@router.post("/sessions/{session}/compact")
async def compact(
    session: str, body: CompactIn, tenant: TenantDep, services: ServicesDep
) -> dict[str, Any]:
    """The messages compacted for `budget_tokens`: results replaced by summaries with refs,
    oldest history dropped as needed, task diagrams injected."""
    offload = services.require_offload()
    result = await offload.compact(tenant, session, body.messages, body.budget_tokens)
    return result.to_json()


@router.get("/sessions/{session}/entries")
async def entries(session: str, tenant: TenantDep, services: ServicesDep) -> list[dict[str, Any]]:
    """The session's offloaded tool calls: summary, 0-10 score, ref, task and diagram node."""
    return [e.to_json() for e in await services.require_offload().entries(tenant, session)]


@router.get("/sessions/{session}/diagrams")
async def diagrams(session: str, tenant: TenantDep, services: ServicesDep) -> dict[str, Any]:
    """The session's tasks and their Mermaid diagrams."""
    return (await services.require_offload().diagrams(tenant, session)).to_json()


@router.get("/refs/{ref_id}")
async def read_back(
    ref_id: str,
    tenant: TenantDep,
    services: ServicesDep,
    query: Annotated[str | None, Query(max_length=1000)] = None,
    max_tokens: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
) -> dict[str, Any]:
    """The exact tool result behind a ref, or the slice around `query`, within `max_tokens`."""
    offload = services.require_offload()
    found = await offload.read_back(tenant, ref_id, query=query, max_tokens=max_tokens)
    return found.to_json()
