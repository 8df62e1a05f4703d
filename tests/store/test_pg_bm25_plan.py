"""PostgreSQL BM25 keeps its plan whatever the planner's statistics say, right after an import:
on tables never analysed, and on tables analysed while they held another tenant's first rows
(what autovacuum does to a fresh table). Each query term's postings are read through the index
by tenant and term, and each row found is looked up by `rid`; planned freely, the search walked
every current memory of the tenant and read its postings again for each (11.5 s instead of
1.9 ms over 750 memories)."""

from __future__ import annotations

from typing import Any

import pytest

from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Scope
from stratamem.store.core.port import Filters
from stratamem.store.opening import RecordStore
from stratamem.store.postgres import text_search
from stratamem.store.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres

WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ro", "su", "ti") for b in
         ("bar", "cel", "dun", "fis", "gom", "hal", "jir", "kev", "lum", "mop")]  # fmt: skip
IMPORTED = 2000
BATCH = 500


def memories(tenant: str, start: int, count: int) -> list[MemoryRecord]:
    return [
        MemoryRecord(f"m{i}", tenant, MemoryType.EPISODIC,
                     "The user " + " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11)),
                     valid_from=1.7e9 + i, created_at=1.7e9 + i, updated_at=1.7e9 + i,
                     mode=Mode.MANUAL)
        for i in range(start, start + count)
    ]  # fmt: skip


def import_memories(store: RecordStore, tenant: str, count: int) -> None:
    for start in range(0, count, BATCH):
        store.upsert_memories(Scope(tenant), memories(tenant, start, min(BATCH, count - start)))
    store.index_text(tenant, Layer.L1)


def scans(store: PostgresStore, tenant: str, query: str) -> list[dict[str, Any]]:
    """The plan's scans of the memories and their postings, for a search of `query`."""
    statement: list[Any] = []

    class Recorder:
        def execute(self, sql: str, params: list[Any]) -> None:
            statement.extend((sql, params))

    keys = text_search.query_keys(store._tokenizer, tenant, query, True)
    text_search.ranked(Recorder(), tenant, Layer.L1, keys, Filters(), 10, None)  # type: ignore[arg-type]
    with store.reading() as conn:
        [plan] = conn.execute(f"EXPLAIN (FORMAT JSON) {statement[0]}", statement[1]).fetchone()[0]
    found: list[dict[str, Any]] = []
    nodes = [plan["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") in ("memories", "memory_terms"):
            found.append(node)
    return found


def assert_by_index(found: list[dict[str, Any]]) -> None:
    assert {n["Relation Name"] for n in found} == {"memories", "memory_terms"}
    for node in found:  # by an index, or a bitmap of one (the planner's pick for a few rows)
        assert node["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), node
        key = "rid" if node["Relation Name"] == "memories" else "term"
        assert f"{key} = " in node.get("Index Cond", node.get("Recheck Cond", "")), node


@pytest.mark.parametrize("statistics", ["never analysed", "analysed young"])
def test_bm25_reads_postings_by_term_and_rows_by_rid_right_after_an_import(
    fresh_store: PostgresStore, statistics: str
) -> None:
    if statistics == "analysed young":
        import_memories(fresh_store, "seed", 60)
        with fresh_store.writing() as conn:
            conn.execute("ANALYZE memories, memory_terms, text_totals")
    import_memories(fresh_store, "acme", IMPORTED)
    query = f"{WORDS[3]} {WORDS[21]} {WORDS[40]}"
    assert_by_index(scans(fresh_store, "acme", query))
    found = fresh_store.search_text(Scope("acme"), Layer.L1, query, Filters(), 10)
    assert len(found) == 10
