"""Dependencies of the routes, as `Annotated` aliases."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from stratamem.api import auth
from stratamem.api.services import Services
from stratamem.core import AsyncMemory

_bearer = HTTPBearer(auto_error=False, description="A tenant's API key, or the admin key.")


def get_services(request: Request) -> Services:
    return cast(Services, request.app.state.services)


ServicesDep = Annotated[Services, Depends(get_services)]
CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def get_memory(services: ServicesDep) -> AsyncMemory:
    return services.memory


def current_tenant(request: Request, services: ServicesDep, credentials: CredentialsDep) -> str:
    """The caller's tenant, from its key, counted against its limits (sync: FastAPI runs it
    off the event loop)."""
    tenant = auth.tenant_of(services.tenants, credentials.credentials if credentials else None)
    services.admit(tenant, declared_length(request.headers.get("content-length")))
    return tenant


def declared_length(value: str | None) -> int:
    """A request's Content-Length (0 when absent or not a number)."""
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


def require_admin(services: ServicesDep, credentials: CredentialsDep) -> None:
    token = credentials.credentials if credentials else None
    auth.check_admin(services.settings, services.tenants, token)


MemoryDep = Annotated[AsyncMemory, Depends(get_memory)]
TenantDep = Annotated[str, Depends(current_tenant)]
AdminDep = Annotated[None, Depends(require_admin)]
