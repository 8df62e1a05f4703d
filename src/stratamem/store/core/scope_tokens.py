"""Tenant tokens for the full-text index: one opaque word per tenant.

Tenant ids may contain punctuation the tokenizer would split; a hex digest is one token, so
`scope_token : "s…"` selects exactly one tenant's rows inside the FTS index. Every result is
still checked against the tenant column before it is returned.
"""

from __future__ import annotations

import hashlib

from stratamem.domain import Layer
from stratamem.store.core.port import Filters

CURRENT, PAST = "current", "past"


def tenant_token(tenant: str) -> str:
    return "s" + hashlib.blake2b(tenant.encode(), digest_size=10).hexdigest()


def memory_fts_scope(tenant: str, valid_to: float | None) -> str:
    return f"{tenant_token(tenant)} {CURRENT if valid_to is None else PAST}"


def scope_match(layer: Layer, tenant: str, filters: Filters) -> str:
    """The FTS5 expression that restricts a query to the tenant (and to current memories)."""
    token = tenant_token(tenant)
    if layer is Layer.L0:
        return f'scope_token : "{token}"'
    if filters.as_of is None:
        return f'fts_scope : "{token} {CURRENT}"'
    return f'fts_scope : "{token}"'
