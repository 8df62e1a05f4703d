"""Anthropic's messages API through the memory proxy: a client's base URL becomes
`…/anthropic` and its API key (`x-api-key`, or `Authorization: Bearer`) the tenant's stratamem
key. The work is `stratamem.proxy.MemoryProxy`'s, in the Anthropic dialect."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from stratamem.api import auth
from stratamem.api.deps import CredentialsDep, ServicesDep, declared_length
from stratamem.api.routes.proxy import RESPONSES, BudgetHeader, SessionHeader, response_of
from stratamem.proxy.anthropic import forwarded

router = APIRouter(prefix="/anthropic/v1", tags=["proxy"], responses=RESPONSES)


async def anthropic_tenant(
    request: Request, services: ServicesDep, credentials: CredentialsDep
) -> str:
    """The caller's tenant, from `x-api-key` (as Anthropic's SDKs send a key) or a bearer
    token, counted against its limits (`deps.current_tenant`'s way)."""
    token = credentials.credentials if credentials else request.headers.get("x-api-key")
    tenant = await run_in_threadpool(auth.tenant_of, services.tenants, token)
    services.admit(tenant, declared_length(request.headers.get("content-length")))
    return tenant


AnthropicTenant = Annotated[str, Depends(anthropic_tenant)]
Beta = Annotated[bool | None, Query(description="Sent by Anthropic's beta clients; ignored.")]


@router.post("/messages", response_class=Response)
async def messages(
    request: Request,
    body: Annotated[dict[str, Any], Body(description="An Anthropic messages request.")],
    tenant: AnthropicTenant,
    services: ServicesDep,
    session: SessionHeader = None,
    budget: BudgetHeader = None,
    beta: Beta = None,
) -> Response:
    """The upstream's message (whole, or streamed as server-sent events), with the session's
    memories recalled into the request and the exchange captured."""
    proxy, headers = services.proxy, forwarded(request.headers)
    answer = await proxy.chat(tenant, body, session=session, budget_tokens=budget,
                              dialect=proxy.anthropic, headers=headers)  # fmt: skip
    return response_of(answer)


@router.post("/messages/count_tokens", response_class=Response)
async def count_tokens(
    request: Request,
    body: Annotated[dict[str, Any], Body(description="An Anthropic count_tokens request.")],
    tenant: AnthropicTenant,
    services: ServicesDep,
    beta: Beta = None,
) -> Response:
    """The upstream's count for the request as the client sent it (without memory)."""
    proxy = services.proxy
    path = "/messages/count_tokens"
    return response_of(await proxy.passed(proxy.anthropic, path, body, forwarded(request.headers)))


@router.get("/models", response_class=Response)
async def models(request: Request, tenant: AnthropicTenant, services: ServicesDep) -> Response:
    """The upstream's models, as it lists them."""
    proxy = services.proxy
    return response_of(await proxy.models(proxy.anthropic, forwarded(request.headers)))
