"""PostgreSQL vector search keeps its plan whatever the planner's statistics say, right after an
import: on tables never analysed, and on tables analysed while they held another tenant's first
rows (what autovacuum does to a fresh table). Each of the nearest pieces' records is looked up by
`rid`; planned freely, on tables analysed young, the join scanned the tenant's records again for
each piece (9.5 ms instead of 1.3 over 750 memories, `test_pg_bm25_plan.py`'s set-up). The
search of all the tenant's vectors (a filtered search's fallback) joins them to the records by
hash or merge; planned freely, it compared every vector with every record of the tenant."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

from stratamem.domain import Layer, Scope
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.port import Filters
from stratamem.store.postgres import vector_search
from stratamem.store.postgres.connection import translate
from stratamem.store.postgres.store import PostgresStore
from tests.store.test_vector_tenants import fill, near

pytestmark = pytest.mark.postgres

DIM = 64
IMPORTED = 750
RECORDS = {Layer.L0: "turns", Layer.L1: "memories"}
VECTORS = {Layer.L0: "turn_vectors", Layer.L1: "memory_vectors"}


def plan_nodes(store: PostgresStore, script: str, bound: list[Any]) -> list[dict[str, Any]]:
    """Every node of the plan of `script`'s EXPLAIN, run in one round trip."""
    with store.reading() as conn:
        cursor = psycopg.ClientCursor(conn.raw)
        cursor.execute(translate(script), bound)
        explained: list[Any] = []
        while True:
            if cursor.description is not None:
                explained = cursor.fetchall()
            if not cursor.nextset():
                break
    found: list[dict[str, Any]] = []
    nodes = [explained[0][0][0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        found.append(node)
    return found


def record_scans(store: PostgresStore, tenant: str, layer: Layer, query: np.ndarray) -> list[Any]:
    """The plan's scans of the records, for the exact search of the tenant's 100 nearest pieces
    (filtered by session, as a recall in a session is)."""
    tail, params = filter_sql(layer, Filters(sessions=("s1",)), "r")
    sql = vector_search.nearest_sql(layer, DIM, False, tail)
    text = vector_search.vector_text(query)
    nodes = plan_nodes(store, f"EXPLAIN (FORMAT JSON) {sql}",
                       [text, tenant, text, 100, tenant, *params])  # fmt: skip
    return [node for node in nodes if node.get("Relation Name") == RECORDS[layer]]


def all_vectors_joins(store: PostgresStore, tenant: str, layer: Layer, query: Any) -> list[str]:
    """The plan's joins, for the search of all the tenant's vectors, in its transaction."""
    tail, params = filter_sql(layer, Filters(sessions=("s1",)), "r")
    search = vector_search.all_vectors_sql(layer, tail)
    script = vector_search.all_vectors_script(layer, tail)
    script = script.replace(search, f"EXPLAIN (FORMAT JSON) {search}")
    bound = [vector_search.vector_text(query), tenant, DIM, tenant, *params, 10]
    nodes = plan_nodes(store, script, bound)
    return [n["Node Type"] for n in nodes if "Join" in n["Node Type"] or "Loop" in n["Node Type"]]


@pytest.mark.parametrize("layer", [Layer.L0, Layer.L1])
@pytest.mark.parametrize("statistics", ["never analysed", "analysed young"])
def test_vector_search_looks_records_up_by_rid_right_after_an_import(
    fresh_store: PostgresStore, statistics: str, layer: Layer
) -> None:
    query = imported(fresh_store, statistics, layer)
    [scan] = record_scans(fresh_store, "t1", layer, query)
    assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), scan
    assert scan["Index Cond"].startswith("(rid = "), scan
    found = fresh_store.search_vector(Scope("t1"), layer, query, Filters(sessions=("s1",)), 10)
    assert len(found) == 10


@pytest.mark.parametrize("layer", [Layer.L0, Layer.L1])
@pytest.mark.parametrize("statistics", ["never analysed", "analysed young"])
def test_the_search_of_all_vectors_joins_by_hash_or_merge_right_after_an_import(
    fresh_store: PostgresStore, statistics: str, layer: Layer
) -> None:
    query = imported(fresh_store, statistics, layer)
    [join] = all_vectors_joins(fresh_store, "t1", layer, query)
    assert join in ("Hash Join", "Merge Join")
    with fresh_store.reading() as conn:
        found = vector_search.search_all(conn, "t1", layer, query, Filters(sessions=("s1",)), 10)
    nearest = fresh_store.search_vector(Scope("t1"), layer, query, Filters(sessions=("s1",)), 10)
    assert [c.id for c in found] == [c.id for c in nearest]  # the store scans its cache (float32)
    assert [c.score for c in found] == pytest.approx([c.score for c in nearest], rel=1e-6)


def imported(store: PostgresStore, statistics: str, layer: Layer) -> np.ndarray:
    """Three tenants' records and vectors, imported into tables never analysed or analysed
    while another tenant's first rows were there; a query vector near them."""
    query = near(np.ones(DIM, dtype=np.float32), 1, 0.0, seed=1)[0]
    if statistics == "analysed young":
        fill(store, Scope("seed"), layer, near(query, 60, 1.0, seed=2))
        with store.writing() as conn:
            conn.execute(f"ANALYZE {RECORDS[layer]}, {VECTORS[layer]}")
    for n in range(3):
        fill(store, Scope(f"t{n}"), layer, near(query, IMPORTED, 1.0, seed=3 + n))
    return query
