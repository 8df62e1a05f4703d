"""The port of the service's tenants and their API keys, beside a `Store` in the same database
(`SqlTenantStore`, `store.py`): a key is shown once, when it is made, and kept only hashed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    label: str
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "created_at": self.created_at}


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as stored: never the secret."""

    key_id: str
    tenant: str
    label: str
    created_at: float
    revoked_at: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "tenant": self.tenant,
            "label": self.label,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key just made: the only moment its token is known."""

    key: ApiKey
    token: str


class TenantStore(Protocol):
    # -- tenants -----------------------------------------------------------------------------
    def create_tenant(self, name: str, label: str = "") -> Tenant:
        """A new tenant (`AlreadyExists` if the name is taken; the name is an identifier)."""

    def get_tenant(self, name: str) -> Tenant:
        """The tenant (`NotFound`)."""

    def list_tenants(self) -> list[Tenant]:
        """Every tenant, by name."""

    def count_tenants(self) -> int:
        """How many tenants there are (also a cheap check that the store answers)."""

    def delete_tenant(self, name: str) -> dict[str, int]:
        """Delete a tenant with all its data and keys; returns the counts of erased records.

        Its keys are revoked first, so nothing is written for it while its data is erased, and
        the tenant and its keys go last: if this is interrupted, calling it again finishes it.
        """

    # -- keys --------------------------------------------------------------------------------
    def create_key(self, tenant: str, label: str = "") -> IssuedKey:
        """Issue a new key for an existing tenant; its token is returned once, never stored."""

    def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key at once (idempotent: a revoked key keeps its first revocation time)."""

    def get_key(self, key_id: str) -> ApiKey:
        """The key, never its secret (`NotFound`)."""

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """The keys (of one tenant), oldest first."""

    def tenant_for_token(self, token: str) -> str | None:
        """The tenant of a live key with exactly this token, else None."""
