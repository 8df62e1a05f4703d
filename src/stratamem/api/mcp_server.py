"""The MCP server: tools an agent calls on its own memory, over stdio or streamable HTTP.

Tools: `search_memories`, `search_conversations`, `recall`, `add_memory`, `read_profile`, and
`read_tool_result` (an offloaded tool result, by its ref) where context offload runs. Over
stdio the tenant is fixed when the server starts (`stratamem mcp --tenant T`: whoever runs it
has the data directory anyway). Over HTTP (`/mcp` beside the REST API) the tenant comes from the
request's API key, like every REST route; requests without a live key get 401 before any MCP
message is read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ConfigDict, Field
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from stratamem import logs
from stratamem.api import auth, mcp_messages
from stratamem.api.deps import declared_length
from stratamem.api.errors import error_response, public_message
from stratamem.api.views import package_version, profile_json
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Layer, MemoryType
from stratamem.domain import Scope as TenantScope
from stratamem.errors import StratamemError, Throttled, Unauthenticated
from stratamem.offload import Offload
from stratamem.retrieval.search import MAX_QUERY_CHARS
from stratamem.store.opening import RecordStore
from stratamem.store.tenants.port import TenantStore

MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "Long-term memory of the user. Call `recall` (or the searches) before answering questions "
    "that may depend on what the user said before; call `add_memory` when the user states a "
    "lasting fact, preference or instruction."
)

TenantOf = Callable[[Context], Awaitable[str]]
Admit = Callable[[str, int], None]
MemoryKind = Literal["persona", "episodic", "instruction"]
# Arguments are bounded as the REST API bounds them.
QueryArg = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
KArg = Annotated[int, Field(strict=True, ge=1, le=100)]
IdentArg = Annotated[str, Field(min_length=1, max_length=128)]
TokensArg = Annotated[int, Field(strict=True, ge=1, le=100_000)]


@contextmanager
def tool_errors() -> Iterator[None]:
    """A typed error of ours reaches the client as its message (a `ToolError`), with no
    traceback in the server's log; anything else stays a crash the SDK reports generically."""
    try:
        yield
    except StratamemError as exc:
        raise ToolError(public_message(exc)) from exc


def strict_tool(fn: Callable[..., Any]) -> Tool:
    """`fn` as a tool that refuses arguments it does not name (as REST refuses unknown fields)."""
    tool = Tool.from_function(fn)
    loose = tool.fn_metadata.arg_model
    config = ConfigDict(**{**loose.model_config, "extra": "forbid"})
    tool.fn_metadata.arg_model = type(loose.__name__, (loose,), {"model_config": config})
    tool.parameters = {**tool.parameters, "additionalProperties": False}
    return tool


def fixed_tenant(tenant: str) -> TenantOf:
    TenantScope(tenant)  # validates the identifier once, at start

    async def tenant_of(ctx: Context) -> str:
        return tenant

    return tenant_of


def tenant_from_key(tenants: TenantStore) -> TenantOf:
    async def tenant_of(ctx: Context) -> str:
        token = bearer_token(dict(ctx.headers or {}))
        return await asyncio.to_thread(auth.tenant_of, tenants, token)

    return tenant_of


def bearer_token(headers: dict[str, str]) -> str | None:
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def build_mcp(
    memory: AsyncMemory, tenant_of: TenantOf, offload: Offload | None = None
) -> MCPServer:
    """An MCP server with the memory tools (and, with `offload`, the read-back of offloaded
    tool results), each scoped by `tenant_of`."""
    functions = _tools(memory, tenant_of)
    if offload is not None:
        functions.append(_read_tool_result(offload, tenant_of))
    with _root_logging_kept():
        return MCPServer(
            "stratamem", version=package_version(), instructions=INSTRUCTIONS,
            log_level="WARNING", tools=[strict_tool(fn) for fn in functions],
        )  # fmt: skip


@contextmanager
def _root_logging_kept() -> Iterator[None]:
    """The SDK's server configures the process's logging when it is built (a rich handler on
    the root logger, unless it has one): the process's logging is the program's to set
    (`stratamem.logs`), so the root logger's handlers and level are put back as they were."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for added in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(added)
        root.setLevel(level)


def _read_tool_result(offload: Offload, tenant_of: TenantOf) -> Callable[..., Any]:
    async def read_tool_result(
        ref_id: IdentArg,
        ctx: Context,
        query: QueryArg | None = None,
        max_tokens: TokensArg | None = None,
    ) -> dict[str, Any]:
        """The exact result of an offloaded tool call (by the ref in its summary), or the part
        around `query` when it is long."""
        with tool_errors():
            tenant = await tenant_of(ctx)
            found = await offload.read_back(tenant, ref_id, query=query, max_tokens=max_tokens)
            return found.to_json()

    return read_tool_result


def _tools(memory: AsyncMemory, tenant_of: TenantOf) -> list[Callable[..., Any]]:
    return [
        _search_memories(memory, tenant_of),
        _search_conversations(memory, tenant_of),
        _recall(memory, tenant_of),
        _add_memory(memory, tenant_of),
        _read_profile(memory, tenant_of),
    ]


def _search_memories(memory: AsyncMemory, tenant_of: TenantOf) -> Callable[..., Any]:
    async def search_memories(query: QueryArg, ctx: Context, k: KArg = 8) -> dict[str, Any]:
        """Search the user's distilled memories (facts, preferences, events, instructions)."""
        with tool_errors():
            hits = await memory.search(await tenant_of(ctx), query, k=k, layers=(Layer.L1,))
            return {"hits": [h.to_json() for h in hits]}

    return search_memories


def _search_conversations(memory: AsyncMemory, tenant_of: TenantOf) -> Callable[..., Any]:
    async def search_conversations(
        query: QueryArg, ctx: Context, k: KArg = 8, session: IdentArg | None = None
    ) -> dict[str, Any]:
        """Search the verbatim conversation history (optionally one session)."""
        sessions = None if session is None else [session]
        with tool_errors():
            tenant = await tenant_of(ctx)
            hits = await memory.search(tenant, query, k=k, layers=(Layer.L0,), sessions=sessions)
            return {"hits": [h.to_json() for h in hits]}

    return search_conversations


def _recall(memory: AsyncMemory, tenant_of: TenantOf) -> Callable[..., Any]:
    async def recall(
        query: QueryArg, ctx: Context, session: IdentArg | None = None
    ) -> dict[str, Any]:
        """What to know before answering `query`: relevant memories and the user's profile.
        With `session` (this conversation), its last turns, which you have, are left out."""
        with tool_errors():
            result = await memory.recall(await tenant_of(ctx), query, session=session)
            return {"context": result.context, "stable": result.stable}

    return recall


def _add_memory(memory: AsyncMemory, tenant_of: TenantOf) -> Callable[..., Any]:
    async def add_memory_tool(
        content: Annotated[str, Field(min_length=1)], ctx: Context, type: MemoryKind = "persona"
    ) -> dict[str, Any]:
        """Remember a lasting fact, preference (persona), event (episodic) or standing rule
        (instruction) the user stated."""
        with tool_errors():
            tenant = await tenant_of(ctx)
            record, created = await memory.add_memory(
                tenant, content, type=MemoryType(type), tell_new=True
            )
            return {"id": record.id, "type": record.type.value, "created": created}

    add_memory_tool.__name__ = "add_memory"
    return add_memory_tool


def _read_profile(memory: AsyncMemory, tenant_of: TenantOf) -> Callable[..., Any]:
    async def read_profile(ctx: Context) -> dict[str, Any]:
        """The user's profile document and the titles of their memory scenes."""
        with tool_errors():
            tenant = TenantScope(await tenant_of(ctx))
        if memory.layers is None:
            return {"profile": None, "scenes": []}
        profile = await asyncio.to_thread(memory.layers.profile, tenant)
        scenes = await asyncio.to_thread(memory.layers.current_scenes, tenant)
        return {
            "profile": None if profile is None else profile_json(profile),
            "scenes": [{"title": s.title, "summary": s.summary} for s in scenes],
        }

    return read_profile


class RequireKey:
    """401 in the service's error shape unless the request carries a live tenant key; 429 when
    the tenant is over its limits (`admit`); a JSON-RPC error for a message the SDK would take
    wrongly (`mcp_messages`)."""

    def __init__(self, app: ASGIApp, tenants: TenantStore, admit: Admit) -> None:
        self.app = app
        self.tenants = tenants
        self.admit = admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            tenant = await asyncio.to_thread(auth.tenant_of, self.tenants, bearer_token(headers))
            self.admit(tenant, declared_length(headers.get("content-length")))
        except Unauthenticated as exc:
            await error_response(401, "unauthenticated", str(exc))(scope, receive, send)
            return
        except Throttled as exc:
            response = error_response(429, "rate_limited", str(exc), exc.retry_after_s)
            await response(scope, receive, send)
            return
        body = await mcp_messages.read_body(receive)
        refused = mcp_messages.refusal(body)
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, mcp_messages.replaying(body, receive), send)


def http_route(server: MCPServer, tenants: TenantStore, admit: Admit) -> Route:
    """The streamable HTTP endpoint as a route of the service: POST only, stateless, with JSON
    answers. A stateless server never sends a message of its own, so it offers no event stream:
    GET (which would open one, held open for ever) and DELETE (which ends a session there is
    not) are 405, as the MCP transport allows.

    DNS-rebinding protection by Host header is off: every request needs an API key, which a
    page rebinding a name to this host does not have. Run `server.session_manager.run()` in
    the app's lifespan.
    """
    server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    endpoint = RequireKey(StreamableHTTPASGIApp(server.session_manager), tenants, admit)
    return Route(MCP_PATH, endpoint=endpoint, methods=["POST"])


def _read_only_offload(memory: AsyncMemory) -> Offload | None:
    """Offload for reading refs back (nothing ingested here starts its stages)."""
    if not isinstance(memory.store, RecordStore):
        return None
    return memory.embedded_offload.offload


def run_stdio(core: Settings, tenant: str) -> None:
    """Serve the tools for `tenant` over stdin/stdout until the client closes them (the log
    on stderr: stdout is the protocol's)."""
    logs.configure(logging.WARNING)
    tenant_of = fixed_tenant(tenant)

    async def main() -> None:
        memory = AsyncMemory.open(core)
        try:
            await memory.load_embedder()  # at start, not in the agent's first tool call
            await build_mcp(memory, tenant_of, _read_only_offload(memory)).run_stdio_async()
        finally:
            await memory.aclose()

    asyncio.run(main())
