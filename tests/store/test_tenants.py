"""Tenants and API keys: keys stored hashed, revocation, one tenant per key."""

from __future__ import annotations

import pytest

from stratamem.clock import ManualClock
from stratamem.errors import AlreadyExists, InvalidIdentifier, NotFound
from stratamem.store.opening import RecordStore
from stratamem.store.tenants.port import TenantStore
from stratamem.store.tenants.store import SqlTenantStore, hash_token, key_id_of
from tests.stores import StoreFactory


@pytest.fixture
def sqlite(open_store: StoreFactory) -> RecordStore:
    """The store (SQLite, then PostgreSQL)."""
    return open_store()


@pytest.fixture
def tenants(sqlite: RecordStore) -> TenantStore:
    return SqlTenantStore(sqlite, clock=ManualClock(100.0))


def test_a_key_resolves_to_its_tenant_and_only_its_hash_is_stored(
    tenants: TenantStore, sqlite: RecordStore
) -> None:
    tenants.create_tenant("acme", "Acme Inc")
    issued = tenants.create_key("acme", "ci")
    assert tenants.tenant_for_token(issued.token) == "acme"
    assert key_id_of(issued.token) == issued.key.key_id
    with sqlite.reading() as conn:
        stored = [tuple(r) for r in conn.execute("SELECT * FROM api_keys").fetchall()]
    assert not any(issued.token in str(value) for row in stored for value in row)
    assert any(hash_token(issued.token) in row for row in stored)


def test_wrong_secret_unknown_and_malformed_tokens_resolve_to_nothing(
    tenants: TenantStore,
) -> None:
    tenants.create_tenant("acme")
    token = tenants.create_key("acme").token
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    for candidate in (forged, "smk_000000000000_abcd", "", "Bearer x", token + " "):
        assert tenants.tenant_for_token(candidate) is None


def test_a_revoked_key_stops_working_and_keeps_its_first_revocation_time(
    sqlite: RecordStore,
) -> None:
    clock = ManualClock(100.0)
    tenants = SqlTenantStore(sqlite, clock=clock)
    tenants.create_tenant("acme")
    issued = tenants.create_key("acme")
    clock.advance(5)
    assert tenants.revoke_key(issued.key.key_id).revoked_at == 105.0
    clock.advance(5)
    assert tenants.revoke_key(issued.key.key_id).revoked_at == 105.0
    assert tenants.tenant_for_token(issued.token) is None


def test_keys_need_an_existing_tenant_and_tenants_are_unique(tenants: TenantStore) -> None:
    with pytest.raises(NotFound):
        tenants.create_key("nobody")
    tenants.create_tenant("acme")
    with pytest.raises(AlreadyExists):
        tenants.create_tenant("acme")
    with pytest.raises(InvalidIdentifier):
        tenants.create_tenant("../etc")
    with pytest.raises(NotFound):
        tenants.revoke_key("ffffffffffff")


def test_listing_tenants_and_keys(tenants: TenantStore) -> None:
    tenants.create_tenant("b")
    tenants.create_tenant("a")
    first = tenants.create_key("a", "one").key
    tenants.create_key("b", "two")
    assert [t.name for t in tenants.list_tenants()] == ["a", "b"]
    assert tenants.list_keys("a") == [first]
    assert len(tenants.list_keys()) == 2


def test_tenants_survive_reopening(open_store: StoreFactory) -> None:
    first = open_store()
    token = SqlTenantStore(first).create_key(SqlTenantStore(first).create_tenant("acme").name).token
    first.close()
    second = open_store()
    try:
        assert SqlTenantStore(second).tenant_for_token(token) == "acme"
    finally:
        second.close()
