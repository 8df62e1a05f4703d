"""Erasing a session or a tenant: nothing of it is left to read, nothing else is touched."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters
from stratamem.store.erasure import BOOKKEEPING_TABLES, SESSION_TABLES, TENANT_TABLES
from stratamem.store.sqlite import SqliteStore
from tests.store.helpers import memory, turn, unit

ACME, OTHER = Scope("acme"), Scope("other")


def filled(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "s.db")
    store.add_turns(ACME, [turn("a1", "my secret diagnosis is flu", session="gone"),
                           turn("a2", "the doctor said rest", session="gone"),
                           turn("k1", "I like hiking in the alps", session="kept")])  # fmt: skip
    store.add_turns(OTHER, [turn("o1", "my secret diagnosis is flu", session="gone",
                                 tenant="other")])  # fmt: skip
    store.upsert_memories(ACME, [
        replace(memory("from-gone", "has the flu", session=None), source_turn_ids=("a1",)),
        replace(memory("mixed", "rests and hikes", session=None), source_turn_ids=("a2", "k1")),
        replace(memory("stated-in-gone", "prefers email", session="gone"), source_turn_ids=()),
        replace(memory("from-kept", "likes hiking", session="kept"), source_turn_ids=("k1",)),
    ])  # fmt: skip
    store.upsert_memories(OTHER, [memory("o-m", "has the flu", tenant="other", session="gone")])
    both = unit(1)[None, :].repeat(2, 0)
    store.store_embeddings(Layer.L0, [("acme", "a1"), ("acme", "k1")], both)
    return store


def test_erasing_a_session_forgets_its_turns_and_what_was_drawn_from_them(
    tmp_path: Path,
) -> None:
    store = filled(tmp_path)
    counts = store.erase_session(ACME, "gone")
    assert counts == {"turns": 2, "memories": 3, "other": 0}
    assert store.get_turns(ACME, ["a1", "a2", "k1"])[0].id == "k1"
    assert len(store.get_turns(ACME, ["a1", "a2", "k1"])) == 1
    assert {m.id for m in store.list_memories(ACME)} == {"from-kept"}
    for layer in (Layer.L0, Layer.L1):
        assert store.search_text(ACME, layer, "secret diagnosis flu", Filters(), 10) == []
    assert [c.id for c in store.search_vector(ACME, Layer.L0, unit(1), Filters(), 10)] == ["k1"]
    assert store.list_sessions(ACME) == ["kept"]
    # the other tenant's session of the same name is untouched
    assert [t.id for t in store.get_turns(OTHER, ["o1"])] == ["o1"]
    assert [m.id for m in store.list_memories(OTHER)] == ["o-m"]


def test_erasing_a_tenant_leaves_nothing_of_it(tmp_path: Path) -> None:
    store = filled(tmp_path)
    counts = store.erase_tenant(ACME)
    assert (counts["turns"], counts["memories"]) == (3, 4)
    assert store.list_sessions(ACME) == [] and store.list_memories(ACME) == []
    assert store.search_vector(ACME, Layer.L0, unit(1), Filters(), 10) == []
    assert store.stats(ACME)["L0"]["records"] == 0
    assert [t.id for t in store.get_turns(OTHER, ["o1"])] == ["o1"]
    store.close()
    files = [tmp_path / name for name in ("s.db", "s.db-wal") if (tmp_path / name).exists()]
    raw = b"".join(f.read_bytes() for f in files)
    assert b"hiking in the alps" not in raw  # overwritten, not just unlinked
    assert b"hiking" not in raw.lower() and b"alps" not in raw.lower()  # nor in the indexes
    assert b"my secret diagnosis" in raw  # the other tenant's copy


def test_every_table_with_tenant_data_is_erased(tmp_path: Path) -> None:
    """A new table holding tenant data must be added to the erase lists."""
    SqliteStore(tmp_path / "s.db").close()
    conn = sqlite3.connect(tmp_path / "s.db")
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
    with_tenant = {t for t, cols in columns.items() if "tenant" in cols}
    assert with_tenant - {"api_keys"} == set(TENANT_TABLES) | set(BOOKKEEPING_TABLES)
    with_session = {t for t in with_tenant if "session" in columns[t]}
    assert with_session - {"turns", "memories"} == set(SESSION_TABLES) | set(BOOKKEEPING_TABLES)


def test_a_new_turn_reusing_an_erased_rows_id_is_not_found_by_its_old_vector(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.add_turns(ACME, [turn("keep", "kept", session="k"), turn("last", "erased", session="e")])
    store.store_embeddings(Layer.L0, [("acme", "keep"), ("acme", "last")],
                           np.stack([unit(1), unit(2)]))  # fmt: skip
    assert [c.id for c in store.search_vector(ACME, Layer.L0, unit(2), Filters(), 1)] == ["last"]
    store.erase_session(ACME, "e")
    store.add_turns(ACME, [turn("new", "not embedded yet", session="n")])  # takes the freed rid
    found = store.search_vector(ACME, Layer.L0, unit(2), Filters(), 5)
    assert [c.id for c in found] == ["keep"]


def test_a_search_by_a_cache_holding_rows_another_process_erased_still_fills_its_limit(
    tmp_path: Path,
) -> None:
    """This process's cache still holds the vectors of turns another process erased; among the
    best of them, the search returns the next best instead, as many as asked, best first."""
    here, there = SqliteStore(tmp_path / "s.db"), SqliteStore(tmp_path / "s.db")
    ids = [f"t{i}" for i in range(12)]
    here.add_turns(ACME, [turn(i, f"text {i}", session="gone" if i in ("t1", "t3") else "kept")
                          for i in ids])  # fmt: skip
    query = unit(0)
    vectors = np.stack([query * (1 - 0.05 * n) + unit(n + 1) * 0.05 * n for n in range(12)])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    here.store_embeddings(Layer.L0, [("acme", i) for i in ids], vectors.astype(np.float32))
    assert [c.id for c in here.search_vector(ACME, Layer.L0, query, Filters(), 5)] == ids[:5]
    there.erase_session(ACME, "gone")
    found = here.search_vector(ACME, Layer.L0, query, Filters(), 5)
    assert [c.id for c in found] == ["t0", "t2", "t4", "t5", "t6"]
    here.close()
    there.close()
