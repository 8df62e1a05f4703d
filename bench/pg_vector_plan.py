"""PostgreSQL exact vector search right after an import, whatever the planner's statistics say:
the statements as they are against the ones they replaced (the baseline), in the same run, on
the same rows and queries:

- nearest: the tenant's 100 nearest pieces, each piece's record looked up by `rid`
  (`vector_search.nearest_sql`) against a plain join;
- all vectors: every vector of the tenant joined to its record (`all_vectors_sql`, the
  fallback of a filtered search), by hash or merge (`ALL_VECTORS_SETTINGS`) against a free plan.

Each case is a fresh database: `--tenants` tenants of `--rows` memories each with random unit
vectors (the local model's width), searched as one of them (its 100 nearest pieces, exact: no
tenant reaches the HNSW threshold here). Cases: tables never analysed; analysed while they held
another tenant's 60 first rows (what autovacuum does to a fresh table); and each of those after
`ANALYZE`. Autovacuum is off on the bench's own server, so the statistics stay as set up.
Printed per case, search and statement: p50 / p95 ms over `--queries` searches (the two
statements take turns, so a slow spell of a shared machine falls on both), the record scan (or
join) EXPLAIN found, and the ratio to the baseline. Both statements' answers are checked to be
the same. The baseline of `all vectors` compares every vector with every record of the tenant
on young statistics: keep `--rows` to a few thousand for it, or leave it out (`--searches`).

    python bench/pg_vector_plan.py [--rows 750] [--tenants 4] [--queries 100]
                                   [--searches nearest,all-vectors] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psycopg

from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Scope
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.port import Filters
from stratamem.store.opening import RecordStore, open_url
from stratamem.store.postgres import vector_search
from stratamem.store.postgres.connection import translate
from stratamem.store.postgres.vector_rows import vector_text

DIM = 384
NEAREST = 100
BATCH = 2000
SEARCHED = "t1"
_TAIL, _PARAMS = filter_sql(Layer.L1, Filters(), "r")
_ALL = vector_search.all_vectors_sql(Layer.L1, _TAIL)
_EXACT = vector_search.neighbours_sql(Layer.L1, DIM, indexed=False)
#: Per search, the baseline's and today's statements: (settings for the transaction, SQL).
SEARCHES = {
    "nearest": {
        "baseline": (None, (
            f"SELECT n.rid, n.score, r.id FROM ({_EXACT}) n LEFT JOIN memories r"
            f" ON r.rid = n.rid AND r.emb_seq = n.seq AND r.tenant = ?{_TAIL}"
            " ORDER BY n.score DESC, n.rid"
        )),
        "now": (None, vector_search.nearest_sql(Layer.L1, DIM, False, _TAIL)),
    },
    "all-vectors": {
        "baseline": (None, _ALL),
        "now": (vector_search.ALL_VECTORS_SETTINGS, _ALL),
    },
}
CASES = ("never analysed", "analysed young")


def unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    rows: np.ndarray = rng.normal(size=(count, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def fill(store: RecordStore, tenant: str, count: int, rng: np.random.Generator) -> None:
    for start in range(0, count, BATCH):
        memories = [
            MemoryRecord(f"m{i}", tenant, MemoryType.EPISODIC, f"the user noted {i}",
                         valid_from=1.7e9 + i, created_at=1.7e9 + i, updated_at=1.7e9 + i,
                         mode=Mode.MANUAL)
            for i in range(start, min(count, start + BATCH))
        ]  # fmt: skip
        store.upsert_memories(Scope(tenant), memories)
        ids = [(tenant, m.id) for m in memories]
        store.store_embeddings(Layer.L1, ids, unit_vectors(rng, len(memories)))


def bound(search: str, query: np.ndarray) -> list[Any]:
    text = vector_text(query)
    if search == "nearest":
        return [text, SEARCHED, text, NEAREST, SEARCHED, *_PARAMS]
    return [text, SEARCHED, DIM, SEARCHED, *_PARAMS, 10]


def scripted(settings: str | None, sql: str) -> bytes:
    """One round trip, as the store sends it: the settings and the statement in a transaction."""
    return translate(sql if settings is None else f"BEGIN; {settings}; {sql}; COMMIT")


def record_scan(cursor: psycopg.ClientCursor[Any], search: str, statement: Any, query: Any) -> str:
    """How the plan reads `memories` (or joins to it), from EXPLAIN ANALYZE."""
    settings, sql = statement
    explain = scripted(settings, f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
    cursor.execute(explain, bound(search, query))
    nodes = [vector_search.last_rows(cursor)[0][0][0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        joins = "Join" in node["Node Type"] or node["Node Type"] == "Nested Loop"
        if joins and search != "nearest":
            return f"{node['Node Type']}, {node.get('Rows Removed by Join Filter', 0)} removed"
        if node.get("Relation Name") == "memories":
            return (f"{node['Node Type']} on {node.get('Index Cond', '(no condition)')},"
                    f" {node['Actual Loops']} x {node['Actual Rows']:.0f} rows")  # fmt: skip
    return "no scan of memories"


def measure(url: str, search: str, queries: np.ndarray) -> dict[str, Any]:
    statements = SEARCHES[search]
    samples: dict[str, list[float]] = {name: [] for name in statements}
    figures: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = psycopg.ClientCursor(conn)
        for name, statement in statements.items():
            figures[name] = {"plan": record_scan(cursor, search, statement, queries[0])}
        for query in queries:
            answers = []
            for name, (settings, sql) in statements.items():
                started = time.perf_counter()
                cursor.execute(scripted(settings, sql), bound(search, query))
                answers.append(vector_search.last_rows(cursor))
                samples[name].append((time.perf_counter() - started) * 1000)
            assert answers[0] == answers[1], "the statements disagree"
    for name, values in samples.items():
        ordered = sorted(values)
        figures[name]["p50_ms"] = round(statistics.median(ordered), 2)
        figures[name]["p95_ms"] = round(ordered[int(0.95 * (len(ordered) - 1))], 2)
    figures["p50_ratio"] = round(figures["now"]["p50_ms"] / figures["baseline"]["p50_ms"], 2)
    return figures


@contextmanager
def database(base_url: str, root: Path) -> Iterator[tuple[str, RecordStore]]:
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    url = urlsplit(base_url)._replace(path=f"/{name}").geturl()
    store = open_url(url, root / "unused.db", vector_index_min=10**9)  # exact searches only
    try:
        yield url, store
    finally:
        store.close()


def run_case(base_url: str, root: Path, case: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    with database(base_url, root) as (url, store):
        if case == "analysed young":
            fill(store, "seed", 60, rng)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE")
        for tenant in range(args.tenants):
            fill(store, f"t{tenant}", args.rows, rng)
        queries = unit_vectors(rng, args.queries)
        found = {f"{case}: {s}": measure(url, s, queries) for s in args.searches}
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        found |= {f"{case}, then ANALYZE: {s}": measure(url, s, queries) for s in args.searches}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=750, help="memories per tenant")
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--searches", type=lambda v: v.split(","), default=list(SEARCHES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import pgserver  # noqa: PLC0415 - the postgres extra

    root = Path(tempfile.mkdtemp(prefix="stratamem-bench-pgvec-"))
    server = pgserver.get_server(root / "pg", cleanup_mode="stop")
    try:
        server.psql("ALTER SYSTEM SET autovacuum = off;")
        server.psql("SELECT pg_reload_conf();")
        figures: dict[str, Any] = {"rows_per_tenant": args.rows, "tenants": args.tenants}
        for case in CASES:
            figures |= run_case(str(server.get_uri()), root, case, args)
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for case, found in figures.items():
        if isinstance(found, dict):
            print(f"{case}: now / baseline p50 {found['p50_ratio']}")
            for name in ("baseline", "now"):
                row = found[name]
                print(f"  {name:8} p50 {row['p50_ms']:8.2f}  p95 {row['p95_ms']:8.2f} ms"
                      f"  {row['plan']}")  # fmt: skip


if __name__ == "__main__":
    main()
