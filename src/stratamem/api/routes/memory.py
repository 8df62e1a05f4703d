"""Capture, recall and search within the caller's tenant."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from stratamem.api.deps import MemoryDep, ServicesDep, TenantDep
from stratamem.api.schemas import (
    ERRORS,
    CaptureIn,
    CaptureOut,
    ErasedOut,
    HitsOut,
    RecallIn,
    RecallOut,
    SearchConversationsIn,
    SearchIn,
    SearchMemoriesIn,
    TurnOut,
    WhoAmIOut,
)
from stratamem.api.views import turn_json
from stratamem.core import MAX_PAGE, MAX_SEQ, AsyncMemory
from stratamem.domain import Layer, Scope, check_ident
from stratamem.layers.ledger import ledger_of
from stratamem.pipeline.timers import clear_session_timers

router = APIRouter(prefix="/v1", tags=["memory"], responses=ERRORS)


# The two routes every agent turn calls answer with their JSON as it is: their `to_json` is
# the shape their response model documents (tests/api/test_fuzz.py checks every answer against
# it), and FastAPI validating the dict against the model before serialising it again cost each
# request more than the route's own work outside the store.


@router.post("/capture", response_model=CaptureOut)
async def capture(body: CaptureIn, tenant: TenantDep, services: ServicesDep) -> JSONResponse:
    """Store each finished message verbatim (idempotently); searchable by BM25 at once. Refused
    (429) while too many of the tenant's records wait for a vector."""
    await services.check_pending(tenant)
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    result = await services.memory.capture(tenant, body.session, messages)
    services.metrics.count("captured_messages", len(result.stored))
    return JSONResponse(result.to_json())


@router.post("/recall", response_model=RecallOut)
async def recall(body: RecallIn, tenant: TenantDep, memory: MemoryDep) -> JSONResponse:
    """The blocks to put before the next model call, and the hits they were made from."""
    result = await memory.recall(
        tenant,
        body.query,
        session=body.session,
        k=body.k,
        budget_chars=body.budget_chars,
        include_turns=body.include_turns,
    )
    return JSONResponse(result.to_json())


@router.get("/whoami", response_model=WhoAmIOut)
async def whoami(tenant: TenantDep) -> dict[str, Any]:
    """The tenant of the caller's key (what `stratamem.client` checks its calls against)."""
    return {"tenant": tenant}


@router.post("/search", response_model=HitsOut)
async def search(body: SearchIn, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """Hybrid search over L1 memories and L0 turns (`layers`), fused into one ranking."""
    return await _hits(memory, tenant, body, tuple(body.layers))


@router.post("/search/memories", response_model=HitsOut)
async def search_memories(
    body: SearchMemoriesIn, tenant: TenantDep, memory: MemoryDep
) -> dict[str, Any]:
    """Hybrid search over L1 memories (current ones, or those valid at `as_of`)."""
    return await _hits(memory, tenant, body, (Layer.L1,))


@router.post("/search/conversations", response_model=HitsOut)
async def search_conversations(
    body: SearchConversationsIn, tenant: TenantDep, memory: MemoryDep
) -> dict[str, Any]:
    """Hybrid search over L0, the verbatim conversation."""
    return await _hits(memory, tenant, SearchMemoriesIn(**body.model_dump()), (Layer.L0,))


async def _hits(
    memory: AsyncMemory, tenant: str, body: SearchMemoriesIn, layers: tuple[Layer, ...]
) -> dict[str, Any]:
    hits = await memory.search(
        tenant, body.query, k=body.k, layers=layers, types=body.types, sessions=body.sessions,
        since=body.since, until=body.until, as_of=body.as_of,
    )  # fmt: skip
    return {"hits": [h.to_json() for h in hits]}


@router.get("/stats")
async def stats(tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """Counts of the caller's turns, memories, sessions and pending embeddings."""
    result = await memory.stats(tenant)
    result.pop("embedding_last_error", None)
    return result


@router.get("/sessions/{session}/turns", response_model=list[TurnOut])
async def turns(
    session: str,
    tenant: TenantDep,
    memory: MemoryDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_SEQ, description="Turns after this sequence number.")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> list[dict[str, Any]]:
    """The session's captured turns, verbatim, in order (page with `after` = the last `seq`),
    each with its L1 outcome (`l1`, the turn ledger: extracted with its memories, nothing to
    remember with the call that looked, pending, quarantined or refused with their records)."""
    found = await memory.turns(tenant, session, after_seq=after, limit=limit)
    if memory.layers is None:
        return [turn_json(t) for t in found]
    entries = await asyncio.to_thread(ledger_of, memory.layers, Scope(tenant), session, found)
    return [{**turn_json(t), "l1": e.to_json()} for t, e in zip(found, entries, strict=True)]


@router.delete("/sessions/{session}", response_model=ErasedOut)
async def erase_session(session: str, tenant: TenantDep, services: ServicesDep) -> dict[str, Any]:
    """Forget a conversation: its turns, its layer and offload records, its pending layer
    timers and what was drawn from it: memories drawn only from it are erased, those drawn
    partly are derived again from the turns left, every scene and profile version built from an
    erased memory is purged and the current ones written again without it
    (`docs/forgetting.md`). Erasing an unknown session erases nothing."""
    check_ident(session, "session")
    erased = await services.memory.erase_session(tenant, session)
    if services.pipeline is not None:
        await clear_session_timers(services.pipeline, tenant, session)
    return {"tenant": tenant, "session": session, "erased": erased}
