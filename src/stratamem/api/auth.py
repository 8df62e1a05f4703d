"""Who is calling: a tenant (by its API key) or the admin (by the admin key of the settings).

The tenant of a request comes from its key only, never from the path or the body.
"""

from __future__ import annotations

import hmac

from stratamem.api.settings import ServerSettings
from stratamem.errors import Forbidden, Unauthenticated
from stratamem.store.tenants.port import TenantStore

_NO_KEY = "send an API key as `Authorization: Bearer <key>` (see `stratamem keys create`)"


def tenant_of(tenants: TenantStore, token: str | None) -> str:
    """The tenant of a live key; raises `Unauthenticated` for a missing, unknown or revoked one."""
    if not token:
        raise Unauthenticated(f"no API key: {_NO_KEY}")
    tenant = tenants.tenant_for_token(token)
    if tenant is None:
        raise Unauthenticated("the API key is unknown or revoked")
    return tenant


def check_admin(settings: ServerSettings, tenants: TenantStore, token: str | None) -> None:
    """Pass only the admin key; a tenant key is `Forbidden`, anything else `Unauthenticated`."""
    if settings.admin_key is None:
        raise Forbidden("admin routes are off: set STRATAMEM_SERVER_ADMIN_KEY to turn them on")
    if not token:
        raise Unauthenticated(f"no admin key: {_NO_KEY}")
    expected = settings.admin_key.get_secret_value().encode("utf-8")
    if hmac.compare_digest(expected, token.encode("utf-8")):
        return
    if tenants.tenant_for_token(token) is not None:
        raise Forbidden("a tenant key cannot use admin routes")
    raise Unauthenticated("the admin key is wrong")
