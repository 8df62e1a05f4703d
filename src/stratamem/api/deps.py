"""Dependencies of the routes, as `Annotated` aliases.

Each is `async def` (FastAPI runs a plain `def` dependency in a worker thread, a trip that
costs every request more than most dependencies' own work; the one that reads the store,
`current_tenant`, goes to FastAPI's threads for that read alone, not to the loop's executor,
whose few threads the searches may all hold) and takes the services from the request
itself rather than through `ServicesDep`: FastAPI solves every dependency of a dependency again
for each request, cached or not, and on the routes every turn calls that solving was half of
the time spent outside the route.
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from stratamem.api import auth
from stratamem.api.services import Services
from stratamem.core import AsyncMemory

_bearer = HTTPBearer(auto_error=False, description="A tenant's API key, or the admin key.")


async def get_services(request: Request) -> Services:
    return services_of(request)


ServicesDep = Annotated[Services, Depends(get_services)]
CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


async def get_memory(request: Request) -> AsyncMemory:
    return services_of(request).memory


def services_of(request: Request) -> Services:
    return cast(Services, request.app.state.services)


async def current_tenant(request: Request, credentials: CredentialsDep) -> str:
    """The caller's tenant, from its key (looked up in a worker thread: the store's connection
    may be busy), counted against its limits."""
    services = services_of(request)
    token = credentials.credentials if credentials else None
    tenant = await run_in_threadpool(auth.tenant_of, services.tenants, token)
    services.admit(tenant, declared_length(request.headers.get("content-length")))
    return tenant


def declared_length(value: str | None) -> int:
    """A request's Content-Length (0 when absent or not a number)."""
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


async def require_admin(services: ServicesDep, credentials: CredentialsDep) -> None:
    token = credentials.credentials if credentials else None
    await run_in_threadpool(auth.check_admin, services.settings, services.tenants, token)


MemoryDep = Annotated[AsyncMemory, Depends(get_memory)]
TenantDep = Annotated[str, Depends(current_tenant)]
AdminDep = Annotated[None, Depends(require_admin)]
