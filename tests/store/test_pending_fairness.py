"""Background embedding is shared between tenants: one tenant's big import cannot hold back
another tenant's few records."""

from __future__ import annotations

from pathlib import Path

from stratamem.capture import build_turns
from stratamem.domain import Layer, Scope
from stratamem.store.core.pieces import fair_share
from stratamem.store.sqlite import SqliteStore


def add(store: SqliteStore, tenant: str, count: int) -> None:
    messages = [{"role": "user", "content": f"{tenant} message {i}"} for i in range(count)]
    turns, _ = build_turns(tenant, "s1", messages, 1_700_000_000.0, 10_000)
    store.add_turns(Scope(tenant), turns)


def test_each_tenant_gets_its_share_of_a_batch(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        add(store, "importer", 500)
        add(store, "small", 3)
        add(store, "other", 1)
        batch = store.pending_embeddings(Layer.L0, 10)
        tenants = [p.tenant for p in batch]
        assert len(batch) == 10
        assert (tenants.count("small"), tenants.count("other")) == (3, 1)
        assert store.count_pending_embeddings(Scope("importer")) == 500
        assert store.count_pending_embeddings(Scope("small")) == 3
        assert store.count_pending_embeddings(Scope("nobody")) == 0
    finally:
        store.close()


def test_one_tenants_pending_records_alone(tmp_path: Path) -> None:
    """What an L1 embeds right after its commit: its own tenant's new records, not a share of
    every tenant's backlog (the new memory was seldom in it)."""
    store = SqliteStore(tmp_path / "s.db")
    try:
        add(store, "importer", 50)
        add(store, "small", 2)
        batch = store.pending_embeddings(Layer.L0, 1, tenant="small")
        assert [(p.tenant, p.text) for p in batch] == [("small", "small message 0")]
        assert store.pending_embeddings(Layer.L0, 10, tenant="nobody") == []
    finally:
        store.close()


def test_fair_share_is_round_robin_and_bounded() -> None:
    assert fair_share([[1, 2, 3, 4], [10], [20, 21]], 5) == [1, 10, 20, 2, 21]
    assert fair_share([[1, 2], []], 10) == [1, 2]
    assert fair_share([], 3) == []
