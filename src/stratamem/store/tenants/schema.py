"""The service's tenants and their hashed API keys, on both databases (DDL written once:
`store/migration.py`)."""

from __future__ import annotations

from stratamem.store.migration import Migration

TENANTS = Migration(30, "service tenants and hashed API keys", """
CREATE TABLE tenants (
    name TEXT PRIMARY KEY,
    label TEXT NOT NULL DEFAULT '',
    created_at {float} NOT NULL
);
CREATE TABLE api_keys (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,  -- postgres only: SQLite's rowid is unnamed
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    secret_sha256 TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at {float} NOT NULL,
    revoked_at {float}
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);
""")  # fmt: skip
