"""The OpenAI-compatible memory proxy: a client's base URL becomes `…/openai/v1` and its API
key the tenant's stratamem key. The work is `stratamem.proxy.MemoryProxy`'s; this module turns
its answers into HTTP responses."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from stratamem.api.deps import ServicesDep, TenantDep
from stratamem.proxy.answers import Answer, WholeAnswer

#: Paths of the proxy's routes (their bodies have the proxy's own size limit).
PREFIXES = ("/openai/", "/anthropic/")
#: What the proxy's routes answer: the upstream's answer (JSON, or server-sent events), or an
#: error whose status and body are the upstream's, or the service's own refusal (401, 413, 422,
#: 429 in the service's shape); every error body is an object with `error`.
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The upstream's answer.",
          "content": {"application/json": {}, "text/event-stream": {}}},
    "default": {"description": "An error: the upstream's status and body, or the service's.",
                "content": {"application/json": {"schema": {
                    "type": "object", "required": ["error"], "properties": {"error": {}}}}}},
}  # fmt: skip
router = APIRouter(prefix="/openai/v1", tags=["proxy"], responses=RESPONSES)

SessionHeader = Annotated[
    str | None,
    Header(alias="X-Stratamem-Session", description="The session to recall for and capture"
           " into (default: one per conversation, or STRATAMEM_PROXY_SESSION)."),
]  # fmt: skip
BudgetHeader = Annotated[
    int | None,
    Header(alias="X-Stratamem-Budget-Tokens", ge=0, le=100_000_000,
           description="Context budget compaction fits this call into (0: no compaction)."),
]  # fmt: skip


class EventStream(StreamingResponse):
    """Server-sent events, each sent as it comes; the events' generator is closed as soon as
    the response ends, however it ends (a client that went away ends the upstream call)."""

    def __init__(self, events: AsyncGenerator[bytes, None]) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(events, media_type="text/event-stream", headers=headers)
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()


def response_of(answer: Answer) -> Response:
    if isinstance(answer, WholeAnswer):
        return Response(answer.body, answer.status, dict(answer.headers), answer.media_type)
    return EventStream(answer.events)


@router.post("/chat/completions", response_class=Response)
async def chat_completions(
    body: Annotated[dict[str, Any], Body(description="An OpenAI chat completions request.")],
    tenant: TenantDep,
    services: ServicesDep,
    session: SessionHeader = None,
    budget: BudgetHeader = None,
) -> Response:
    """The upstream's answer (whole, or streamed as server-sent events), with the session's
    memories recalled into the request and the exchange captured."""
    answer = await services.proxy.chat(tenant, body, session=session, budget_tokens=budget)
    return response_of(answer)


@router.get("/models", response_class=Response)
async def models(tenant: TenantDep, services: ServicesDep) -> Response:
    """The upstream's models, as it lists them."""
    return response_of(await services.proxy.models())
