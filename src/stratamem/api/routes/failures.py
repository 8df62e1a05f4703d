"""The failure records of the caller's LLM stages, with their raw replies, and their retry."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from stratamem.api.deps import ServicesDep, TenantDep
from stratamem.api.schemas import ERRORS, BulkRetryOut, FailureOut, Ident, RetryOut
from stratamem.api.views import bulk_retry_json, failure_json, retry_json
from stratamem.failures import BULK_RETRY_LIMIT
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus

router = APIRouter(prefix="/v1", tags=["failures"], responses=ERRORS)
Stage = Annotated[str, Query(min_length=1, max_length=32, description="L1, L2, offload-l1 …")]


@router.get("/failures", response_model=list[FailureOut])
async def list_failures(
    tenant: TenantDep,
    services: ServicesDep,
    session: Annotated[Ident | None, Query()] = None,
    stage: Stage | None = None,
    kind: FailureKind | None = None,
    status: FailureStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> list[dict[str, Any]]:
    """Failure records of the LLM stages, newest first: quarantined turns, failed stages,
    rejected batches, dropped items, offline fallbacks, each with its raw replies."""
    query = FailureQuery(session, stage, kind, status, limit, offset)
    return [failure_json(f) for f in await services.failures.list(tenant, query)]


@router.post("/failures/retry", response_model=BulkRetryOut)
async def retry_failures(
    tenant: TenantDep,
    services: ServicesDep,
    session: Annotated[Ident | None, Query()] = None,
    stage: Stage | None = None,
    kind: FailureKind | None = None,
    limit: Annotated[int, Query(ge=1, le=BULK_RETRY_LIMIT)] = BULK_RETRY_LIMIT,
) -> dict[str, Any]:
    """Re-run now, one after the other, the open quarantined turns and failed stages of a
    session, stage or kind (all of them without a filter; the oldest first, at most `limit`),
    and answer which were resolved, are still open, or failed (with the error)."""
    return bulk_retry_json(await services.failures.retry_many(tenant, session, stage, kind, limit))


@router.get("/failures/{failure_id}", response_model=FailureOut)
async def get_failure(failure_id: str, tenant: TenantDep, services: ServicesDep) -> dict[str, Any]:
    """One failure record with its raw replies."""
    return failure_json(await services.failures.get(tenant, failure_id))


@router.post("/failures/{failure_id}/retry", response_model=RetryOut)
async def retry_failure(
    failure_id: str, tenant: TenantDep, services: ServicesDep
) -> dict[str, Any]:
    """Re-run a quarantined turn or a failed stage now and answer with the record after it
    (resolved, or still open) and what the re-run did; a retry that fails answers its error."""
    return retry_json(await services.failures.retry(tenant, failure_id))
