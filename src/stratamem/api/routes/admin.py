"""Tenants and keys, for the holder of the admin key only."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from stratamem.api.deps import AdminDep, ServicesDep
from stratamem.api.schemas import (
    ERRORS,
    ErasedOut,
    IssuedKeyOut,
    KeyIn,
    KeyOut,
    TenantIn,
    TenantOut,
)
from stratamem.domain import Scope, check_ident
from stratamem.pipeline.timers import clear_session_timers

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ERRORS)


@router.post("/tenants", response_model=TenantOut, status_code=201)
def create_tenant(body: TenantIn, _: AdminDep, services: ServicesDep) -> dict[str, Any]:
    return services.tenants.create_tenant(body.name, body.label).to_json()


@router.get("/tenants", response_model=list[TenantOut])
def list_tenants(_: AdminDep, services: ServicesDep) -> list[dict[str, Any]]:
    return [t.to_json() for t in services.tenants.list_tenants()]


@router.delete("/tenants/{tenant}", response_model=ErasedOut)
async def delete_tenant(tenant: str, _: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """Delete a tenant: its keys stop working at once, then all its data (turns, memories,
    scenes, profile, offload records) is erased, every session's pending timers are cleared
    from the pipeline, then the tenant and its keys are removed."""
    check_ident(tenant, "tenant")
    sessions = await asyncio.to_thread(services.memory.store.sessions_with_data, Scope(tenant))
    erased = await asyncio.to_thread(services.tenants.delete_tenant, tenant)
    if services.pipeline is not None:
        for session in sessions:
            await clear_session_timers(services.pipeline, tenant, session)
    return {"tenant": tenant, "session": None, "erased": erased}


@router.post("/tenants/{tenant}/keys", response_model=IssuedKeyOut, status_code=201)
def create_key(tenant: str, body: KeyIn, _: AdminDep, services: ServicesDep) -> dict[str, Any]:
    """A new key for the tenant; the token is in this response only."""
    issued = services.tenants.create_key(check_ident(tenant, "tenant"), body.label)
    return {**issued.key.to_json(), "token": issued.token}


@router.get("/tenants/{tenant}/keys", response_model=list[KeyOut])
def list_keys(tenant: str, _: AdminDep, services: ServicesDep) -> list[dict[str, Any]]:
    services.tenants.get_tenant(check_ident(tenant, "tenant"))
    return [k.to_json() for k in services.tenants.list_keys(tenant)]


@router.delete("/keys/{key_id}", response_model=KeyOut)
def revoke_key(key_id: str, _: AdminDep, services: ServicesDep) -> dict[str, Any]:
    return services.tenants.revoke_key(key_id).to_json()
