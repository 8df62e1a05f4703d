"""Tenant-prefixed full-text words: the prefix, and the migration of an existing store."""

from __future__ import annotations

from pathlib import Path

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters
from stratamem.store.core.scope_tokens import memory_fts_scope, tenant_token
from stratamem.store.core.tenant_words import tenant_code, tenant_words
from stratamem.store.sqlite import SqliteStore
from stratamem.store.sqlite.connection import connect
from stratamem.store.sqlite.migrations import MIGRATIONS, migrate


def test_every_word_gets_the_tenant_code_and_separators_stay() -> None:
    code = tenant_code("acme")
    assert len(code) == 8 and not set(code) & set("aeiouy")
    assert tenant_words("acme", "Grand-opening, don't 2023_x!") == (
        f"{code}Grand-{code}opening, {code}don'{code}t {code}2023_{code}x!"
    )
    assert tenant_code("acme") != tenant_code("acme2")
    assert tenant_words("acme", None) is None


def test_an_existing_store_is_reindexed_by_the_migration(tmp_path: Path) -> None:
    conn = connect(tmp_path / "old.db")
    migrate(conn, MIGRATIONS[:4])  # up to the neighbour columns, before the tenant words
    conn.execute(
        "INSERT INTO turns (tenant, id, session, seq, role, speaker, text, ts, created_at,"
        " scope_token) VALUES ('acme', 't1', 's1', 1, 'user', 'Ann', 'the grand opening',"
        " 0, 0, ?)",
        (tenant_token("acme"),),
    )
    conn.execute(
        "INSERT INTO memories (tenant, id, type, content, priority, source_turn_ids, valid_from,"
        " created_at, updated_at, mode, fts_scope) VALUES ('acme', 'm1', 'episodic',"
        " 'Ann opened a bakery', 50, '[]', 0, 0, 0, 'manual', ?)",
        (memory_fts_scope("acme", None),),
    )
    conn.close()
    store = SqliteStore(tmp_path / "old.db")
    scope = Scope("acme")
    assert [c.id for c in store.search_text(scope, Layer.L0, "grand opening", Filters(), 5)] == [
        "t1"
    ]
    assert [c.id for c in store.search_text(scope, Layer.L1, "bakery", Filters(), 5)] == ["m1"]
    assert store.search_text(Scope("other"), Layer.L0, "grand opening", Filters(), 5) == []
