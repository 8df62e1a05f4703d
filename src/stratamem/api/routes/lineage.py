"""Lineage of the caller's tenant: what a memory, scene or profile version was built from and
what was built from it ("why do you know this?"), and forgetting a single turn or memory with
everything built on it (`docs/forgetting.md`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from stratamem.api.deps import MemoryDep, TenantDep
from stratamem.api.schemas import ERRORS, ErasedCounts
from stratamem.domain import check_ident

router = APIRouter(prefix="/v1", tags=["lineage"], responses=ERRORS)
Version = Annotated[int, Query(ge=0, le=2**31 - 1, description="0 (default): the current.")]


class RefOut(BaseModel):
    kind: str = Field(description="turn, memory, scene or profile.")
    id: str = Field(description="The record's id (empty for the profile).")
    version: int = Field(description="The scene or profile version; 0 for turns and memories.")


class LineageOut(BaseModel):
    record: RefOut
    sources: list[RefOut] = Field(description="What it was built from.")
    derived: list[RefOut] = Field(description="What was built from it.")


class ForgottenOut(BaseModel):
    tenant: str
    erased: ErasedCounts


@router.get("/memories/{memory_id}/lineage", response_model=LineageOut)
async def memory_lineage(memory_id: str, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """The turns and memories a memory came from, and the memory that superseded it and the
    scene and profile versions built from it."""
    return (await memory.memory_lineage(tenant, memory_id)).to_json()


@router.get("/scenes/{scene_id}/lineage", response_model=LineageOut)
async def scene_lineage(
    scene_id: str, tenant: TenantDep, memory: MemoryDep, version: Version = 0
) -> dict[str, Any]:
    """The memories a scene version was built from, and the profile versions built from it."""
    return (await memory.scene_lineage(tenant, scene_id, version)).to_json()


@router.get("/profile/lineage", response_model=LineageOut)
async def profile_lineage(
    tenant: TenantDep, memory: MemoryDep, version: Version = 0
) -> dict[str, Any]:
    """The memories and scene versions a profile version was written from."""
    return (await memory.profile_lineage(tenant, version)).to_json()


@router.delete("/turns/{turn_id}", response_model=ForgottenOut)
async def erase_turn(turn_id: str, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """Forget one captured turn and what was drawn from it: memories drawn only from it are
    erased, those drawn partly are derived again, scenes and the profile built on them are
    written again and their earlier versions purged. Erasing an unknown turn erases nothing."""
    check_ident(turn_id, "turn id")
    return {"tenant": tenant, "erased": await memory.erase_turn(tenant, turn_id)}


@router.post("/memories/{memory_id}/erase", response_model=ForgottenOut)
async def erase_memory(memory_id: str, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """Forget a memory for good (unlike `DELETE /v1/memories/{id}`, which ends its validity
    and keeps its history): it and the versions it consumed leave the history, and what was
    built from it is written again without it. The turns it came from stay."""
    return {"tenant": tenant, "erased": await memory.erase_memory(tenant, memory_id)}


@router.get(
    "/export",
    response_class=Response,
    responses={200: {"content": {"application/x-ndjson": {}},
                     "description": "The tenant's export, one JSON object a line."}},
)
async def export_tenant(tenant: TenantDep, memory: MemoryDep) -> Response:
    """Everything held about the caller's tenant as versioned JSONL (`stratamem export`): a
    header line, then one row a line (turns, memories with their versions, scenes, profile,
    lineage, layer state, offload entries and refs), for `stratamem import-export`."""
    lines = await memory.export_tenant(tenant)
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return Response(body, media_type="application/x-ndjson")
