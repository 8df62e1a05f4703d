"""PostgreSQL vector search keeps its plan whatever the planner's statistics say, right after an
import: on tables never analysed, and on tables analysed while they held another tenant's first
rows (what autovacuum does to a fresh table). Each of the nearest pieces' records is looked up by
`rid`; planned freely, on tables analysed young, the join scanned the tenant's records again for
each piece (9.5 ms instead of 1.3 over 750 memories, `test_pg_bm25_plan.py`'s set-up)."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

from stratamem.domain import Layer, Scope
from stratamem.store.base import Filters
from stratamem.store.filters_sql import filter_sql
from stratamem.store.postgres import vector_search
from stratamem.store.postgres.connection import translate
from stratamem.store.postgres.store import PostgresStore
from tests.store.test_vector_tenants import fill, near

pytestmark = pytest.mark.postgres

DIM = 64
IMPORTED = 750
RECORDS = {Layer.L0: "turns", Layer.L1: "memories"}
VECTORS = {Layer.L0: "turn_vectors", Layer.L1: "memory_vectors"}


def record_scans(store: PostgresStore, tenant: str, layer: Layer, query: np.ndarray) -> list[Any]:
    """The plan's scans of the records, for the exact search of the tenant's 100 nearest pieces
    (filtered by session, as a recall in a session is)."""
    tail, params = filter_sql(layer, Filters(sessions=("s1",)), "r")
    sql = vector_search.nearest_sql(layer, DIM, False, tail)
    text = vector_search.vector_text(query)
    with store.reading() as conn:
        cursor = psycopg.ClientCursor(conn.raw)
        explain = translate(f"EXPLAIN (FORMAT JSON) {sql}")
        [plan] = cursor.execute(explain, [text, tenant, text, 100, tenant, *params]).fetchone()[0]
    found: list[dict[str, Any]] = []
    nodes = [plan["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") == RECORDS[layer]:
            found.append(node)
    return found


@pytest.mark.parametrize("layer", [Layer.L0, Layer.L1])
@pytest.mark.parametrize("statistics", ["never analysed", "analysed young"])
def test_vector_search_looks_records_up_by_rid_right_after_an_import(
    fresh_store: PostgresStore, statistics: str, layer: Layer
) -> None:
    query = near(np.ones(DIM, dtype=np.float32), 1, 0.0, seed=1)[0]
    if statistics == "analysed young":
        fill(fresh_store, Scope("seed"), layer, near(query, 60, 1.0, seed=2))
        with fresh_store.writing() as conn:
            conn.execute(f"ANALYZE {RECORDS[layer]}, {VECTORS[layer]}")
    for n in range(3):
        fill(fresh_store, Scope(f"t{n}"), layer, near(query, IMPORTED, 1.0, seed=3 + n))
    [scan] = record_scans(fresh_store, "t1", layer, query)
    assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), scan
    assert scan["Index Cond"].startswith("(rid = "), scan
    found = fresh_store.search_vector(Scope("t1"), layer, query, Filters(sessions=("s1",)), 10)
    assert len(found) == 10
