"""`SqlTenantStore`: tenants and their API keys, stored hashed, beside a SQL store (migration 30,
`schema.py`).

A key reads `smk_<key id>_<secret>`. Only the key id and the SHA-256 of the whole key are kept:
the key id finds the row, the hash is compared in constant time. Keys are 32 random bytes, so a
fast hash is enough (there is nothing to brute-force as with passwords).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from typing import Any

from stratamem.clock import Clock, SystemClock
from stratamem.domain import Scope, check_ident
from stratamem.errors import AlreadyExists, InvalidInput, NotFound
from stratamem.store.sql import DUPLICATE, SqlStore
from stratamem.store.tenants.port import ApiKey, IssuedKey, Tenant

KEY_PREFIX = "smk"
KEY_ID_BYTES = 6
SECRET_BYTES = 32
MAX_LABEL_CHARS = 200
_TOKEN = re.compile(rf"^{KEY_PREFIX}_(?P<key_id>[0-9a-f]{{{KEY_ID_BYTES * 2}}})_[A-Za-z0-9_\-]+$")

RandomBytes = Callable[[int], bytes]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def key_id_of(token: str) -> str | None:
    """The key id inside a well-formed token, else None."""
    match = _TOKEN.match(token)
    return None if match is None else match.group("key_id")


class SqlTenantStore:
    """`TenantStore` over a SQL store (its `reading()` / `writing()`)."""

    def __init__(
        self,
        store: SqlStore,
        clock: Clock | None = None,
        random_bytes: RandomBytes = secrets.token_bytes,
    ) -> None:
        self._store = store
        self._clock = clock or SystemClock()
        self._random = random_bytes

    # -- tenants -----------------------------------------------------------------------------
    def create_tenant(self, name: str, label: str = "") -> Tenant:
        check_ident(name, "tenant")
        tenant = Tenant(name, _label(label), self._clock.now())
        try:
            with self._store.writing() as conn:
                conn.execute(
                    "INSERT INTO tenants (name, label, created_at) VALUES (?, ?, ?)",
                    (tenant.name, tenant.label, tenant.created_at),
                )
        except DUPLICATE as exc:
            raise AlreadyExists(f"tenant {name!r} exists already") from exc
        return tenant

    def get_tenant(self, name: str) -> Tenant:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT name, label, created_at FROM tenants WHERE name = ?", (name,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no tenant {name!r}: create it with `stratamem tenants create`")
        return Tenant(row["name"], row["label"], row["created_at"])

    def list_tenants(self) -> list[Tenant]:
        with self._store.reading() as conn:
            rows = conn.execute(
                "SELECT name, label, created_at FROM tenants ORDER BY name"
            ).fetchall()
        return [Tenant(r["name"], r["label"], r["created_at"]) for r in rows]

    def count_tenants(self) -> int:
        with self._store.reading() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM tenants").fetchone()[0])

    def delete_tenant(self, name: str) -> dict[str, int]:
        self.get_tenant(name)
        with self._store.writing() as conn:
            conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE tenant = ? AND revoked_at IS NULL",
                (self._clock.now(), name),
            )
        erased = self._store.erase_tenant(Scope(name))
        with self._store.writing() as conn:
            conn.execute("DELETE FROM api_keys WHERE tenant = ?", (name,))
            conn.execute("DELETE FROM tenants WHERE name = ?", (name,))
        return erased

    # -- keys --------------------------------------------------------------------------------
    def create_key(self, tenant: str, label: str = "") -> IssuedKey:
        self.get_tenant(tenant)
        key_id = self._random(KEY_ID_BYTES).hex()
        secret = self._random(SECRET_BYTES).hex()
        token = f"{KEY_PREFIX}_{key_id}_{secret}"
        key = ApiKey(key_id, tenant, _label(label), self._clock.now(), None)
        with self._store.writing() as conn:
            conn.execute(
                "INSERT INTO api_keys (key_id, tenant, secret_sha256, label, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (key.key_id, key.tenant, hash_token(token), key.label, key.created_at),
            )
        return IssuedKey(key, token)

    def revoke_key(self, key_id: str) -> ApiKey:
        with self._store.writing() as conn:
            conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (self._clock.now(), key_id),
            )
        return self.get_key(key_id)

    def get_key(self, key_id: str) -> ApiKey:
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT key_id, tenant, label, created_at, revoked_at FROM api_keys"
                " WHERE key_id = ?",
                (key_id,),
            ).fetchone()
        if row is None:
            raise NotFound(f"no API key {key_id!r}")
        return _key_from_row(row)

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        where, params = ("WHERE tenant = ?", (tenant,)) if tenant else ("", ())
        with self._store.reading() as conn:
            rows = conn.execute(
                "SELECT key_id, tenant, label, created_at, revoked_at FROM api_keys"
                f" {where} ORDER BY created_at, rowid",
                params,
            ).fetchall()
        return [_key_from_row(r) for r in rows]

    def tenant_for_token(self, token: str) -> str | None:
        key_id = key_id_of(token)
        if key_id is None:
            return None
        with self._store.reading() as conn:
            row = conn.execute(
                "SELECT tenant, secret_sha256 FROM api_keys"
                " WHERE key_id = ? AND revoked_at IS NULL",
                (key_id,),
            ).fetchone()
        if row is None or not hmac.compare_digest(row["secret_sha256"], hash_token(token)):
            return None
        return str(row["tenant"])


def _label(label: str) -> str:
    if len(label) > MAX_LABEL_CHARS:
        raise InvalidInput(f"label is longer than {MAX_LABEL_CHARS} characters")
    return label


def _key_from_row(row: Any) -> ApiKey:
    return ApiKey(row["key_id"], row["tenant"], row["label"], row["created_at"], row["revoked_at"])
