"""Search at scale, PostgreSQL vs SQLite (issue 15's figure): one tenant of `--tenant-rows`
memories in a store of `--total-rows` (the rest spread over 99 tenants, each below the size that
gets its own vector index), the query vector given (no embedding).

Both stores hold the same synthetic rows: texts of Zipf-distributed pseudo-words (as
bench/store.py) and clustered unit vectors of 384 dimensions (centres plus noise: random uniform
vectors are all nearly equidistant in 384 dimensions, which no embedding model produces and
which no approximate index can rank). SQLite is filled through the store; PostgreSQL by COPY
(memories, their text index rows and their pgvector rows, as the store would write them), then
the large tenant's HNSW index is built. Both are kept under `--cache` and reused by the next
run with the same sizes.

Figures: p50/p95 of BM25, the vector search and both (hybrid: the two lists as
`retrieval/search.py` gathers them, the vector search alongside the full-text one), on each
store, each query having run once before (a warm cache: a tenant in use); on PostgreSQL
also the exact vector search of the large tenant (what it would cost without its index), a
small tenant's searches, and recall@10 of each tenant's search (the large one's index, the
small one's scan of its cached vectors) against the exact search in SQL.

    python bench/pg_scale.py [--tenant-rows 100000] [--total-rows 1000000] [--queries 200]
                             [--cache /tmp/stratamem-pg-scale]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from answers import require_filled  # bench/answers.py
from postgres import _ZIPF, WORDS, timed  # bench/postgres.py: the same vocabulary and timer
from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Scope
from stratamem.retrieval.config import RetrievalConfig
from stratamem.retrieval.search import SearchRequest, candidate_lists
from stratamem.store.core.port import EmbeddingInfo, Filters
from stratamem.store.core.scope_tokens import memory_fts_scope
from stratamem.store.core.tenant_words import tenant_words
from stratamem.store.opening import RecordStore, open_url
from stratamem.store.postgres import text_index, vector_search
from stratamem.store.postgres.connection import translate
from stratamem.store.postgres.store import PostgresStore
from stratamem.store.postgres.tokens import Tokenizer
from stratamem.store.postgres.vector_index import index_name

DIM = 384
BIG = Scope("bench")
OTHERS = 99
CHUNK = 10_000
CENTRES = 2_000
NOISE = 1.2  # noise norm / centre norm: a vector's cosine to its centre is about 0.64
MODEL = EmbeddingInfo("bench-synthetic", DIM)
T0 = 1.7e9
HYBRID = RetrievalConfig()
_CENTRES = np.random.default_rng(12345).normal(size=(CENTRES, DIM)).astype(np.float32)


def unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    rows = _CENTRES[rng.integers(0, CENTRES, count)]
    rows = rows + NOISE * rng.normal(size=(count, DIM)).astype(np.float32)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def tenants(args: argparse.Namespace) -> list[tuple[str, int]]:
    per_other = (args.total_rows - args.tenant_rows) // OTHERS
    return [(BIG.tenant, args.tenant_rows)] + [(f"other{t}", per_other) for t in range(OTHERS)]


def chunks(tenant: str, count: int) -> Any:
    """The tenant's rows, `CHUNK` at a time: (first index, contents, vectors); the same on
    every run."""
    rng = np.random.default_rng(_seed(tenant))
    for start in range(0, count, CHUNK):
        size = min(CHUNK, count - start)
        lengths = rng.integers(6, 14, size=size)
        words = rng.choice(WORDS, size=int(lengths.sum()), p=_ZIPF)
        ends = np.cumsum(lengths)
        pairs = zip(lengths, ends, strict=True)
        contents = ["The user " + " ".join(words[e - n : e]) for n, e in pairs]
        yield start, contents, unit_vectors(rng, size)


def _seed(tenant: str) -> int:
    return int.from_bytes(tenant.encode()[:8].ljust(8, b"\0"), "little") % 2**32


def memory(tenant: str, index: int, content: str) -> MemoryRecord:
    at = T0 + index
    return MemoryRecord(f"m{index}", tenant, MemoryType.EPISODIC, content, valid_from=at,
                        created_at=at, updated_at=at, mode=Mode.MANUAL)  # fmt: skip


# -- SQLite: through the store -----------------------------------------------------------------
def fill_sqlite(path: Path, args: argparse.Namespace) -> None:
    store = open_url(f"sqlite:{path}", path)
    try:
        store.bind_embedding(MODEL)
        for tenant, count in tenants(args):
            for start, contents, vectors in chunks(tenant, count):
                rows = [memory(tenant, start + i, c) for i, c in enumerate(contents)]
                store.upsert_memories(Scope(tenant), rows)
                store.store_embeddings(Layer.L1, [(tenant, m.id) for m in rows], vectors)
    finally:
        store.close()


# -- PostgreSQL: by COPY -----------------------------------------------------------------------
_MEMORY_COPY = (
    "COPY memories (rid, tenant, id, type, content, priority, source_turn_ids, valid_from,"
    " created_at, updated_at, mode, metadata, fts_scope, embedding, emb_seq, fts_len, fts_dirty)"
    " FROM STDIN (FORMAT BINARY)"
)
_MEMORY_TYPES = ["int8", "text", "text", "text", "text", "int4", "text", "float8", "float8",
                 "float8", "text", "text", "text", "bytea", "int8", "int4", "bool"]  # fmt: skip


def fill_postgres(url: str, args: argparse.Namespace) -> None:
    PostgresStore(url).close()  # the schema
    tokenizer = Tokenizer()
    rid = 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES ('embedding', %s)",
                     (json.dumps({"model": MODEL.model, "dim": MODEL.dim}),))  # fmt: skip
        for tenant, count in tenants(args):
            tokens_total = 0
            for start, contents, vectors in chunks(tenant, count):
                rids = np.arange(rid + 1, rid + len(contents) + 1)
                rid += len(contents)
                postings, lengths = _terms(tokenizer, tenant, rids, contents)
                tokens_total += sum(lengths)
                _copy_memories(conn, tenant, start, rids, contents, vectors, lengths)
                _copy_terms(conn, postings)
                _copy_vectors(conn, tenant, rids, vectors)
            conn.execute(
                "INSERT INTO text_totals (tenant, layer, rows, tokens) VALUES (%s, 'L1', %s, %s)",
                (tenant, count, tokens_total),
            )
            conn.execute("INSERT INTO vector_marks (tenant, layer, seq) VALUES (%s, 'L1', %s)",
                         (tenant, rid))  # fmt: skip
        conn.execute("SELECT setval('emb_seq', %s)", (rid,))
        conn.execute("SELECT setval(pg_get_serial_sequence('memories', 'rid'), %s)", (rid,))
        conn.execute("ANALYZE")
    tokenizer.close()


def _vectors_copy_sql() -> str:
    return "COPY memory_vectors (rid, piece, tenant, seq, embedding) FROM STDIN (FORMAT BINARY)"


def _terms(
    tokenizer: Tokenizer, tenant: str, rids: np.ndarray, contents: list[str]
) -> tuple[list[tuple[str, str, int, list[float]]], list[int]]:
    """The text index's rows of each memory, as `text_index.index_batch` writes them, and each
    memory's indexed length."""
    tokens = tokenizer.tokens([[tenant_words(tenant, c)] for c in contents])
    postings, lengths = [], []
    for rid, columns in zip(rids.tolist(), tokens, strict=True):
        postings.extend((tenant, term, rid, counts)
                        for term, counts in text_index.terms(columns).items())  # fmt: skip
        lengths.append(sum(len(c) for c in columns) + text_index.SCOPE_TOKENS[Layer.L1])
    return postings, lengths


def _copy_terms(conn: psycopg.Connection[Any], postings: list[Any]) -> None:
    with conn.cursor().copy(
        "COPY memory_terms (tenant, term, rid, tf) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["text", "text", "int8", "float4[]"])
        for posting in postings:
            copy.write_row(posting)


def _copy_memories(
    conn: psycopg.Connection[Any], tenant: str, start: int, rids: np.ndarray,
    contents: list[str], vectors: np.ndarray, lengths: list[int],
) -> None:  # fmt: skip
    scope = memory_fts_scope(tenant, None)
    with conn.cursor().copy(_MEMORY_COPY) as copy:
        copy.set_types(_MEMORY_TYPES)
        for i, (rid, content) in enumerate(zip(rids.tolist(), contents, strict=True)):
            at = T0 + start + i
            copy.write_row((rid, tenant, f"m{start + i}", "episodic", content, 2, "[]", at, at,
                            at, "manual", "{}", scope, vectors[i].tobytes(), rid, lengths[i],
                            False))  # fmt: skip


def _copy_vectors(
    conn: psycopg.Connection[Any], tenant: str, rids: np.ndarray, vectors: np.ndarray
) -> None:
    """pgvector's binary form, built with numpy: a dimension, a zero, the values big-endian."""
    name = tenant.encode()
    row = np.dtype([
        ("fields", ">i2"), ("n1", ">i4"), ("rid", ">i8"), ("n2", ">i4"), ("piece", ">i2"),
        ("n3", ">i4"), ("tenant", f"S{len(name)}"), ("n4", ">i4"), ("seq", ">i8"), ("n5", ">i4"),
        ("dim", ">i2"), ("unused", ">i2"), ("values", ">f4", (DIM,)),
    ])  # fmt: skip
    rows = np.zeros(len(rids), dtype=row)
    rows["fields"], rows["n1"], rows["rid"], rows["n2"] = 5, 8, rids, 2
    rows["n3"], rows["tenant"], rows["n4"], rows["seq"] = len(name), name, 8, rids
    rows["n5"], rows["dim"], rows["values"] = 4 + 4 * DIM, DIM, vectors
    header = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
    with conn.cursor().copy(_vectors_copy_sql()) as copy:
        copy.write(header + rows.tobytes() + b"\xff\xff")


# -- measuring ---------------------------------------------------------------------------------
def check_filled(store: RecordStore, kind: str, args: argparse.Namespace) -> None:
    """Both measured tenants hold what they were filled with, and both retrievers answer."""
    queries = [" ".join(WORDS[100:110]), " ".join(WORDS[:10])]
    vector = unit_vectors(np.random.default_rng(1), 1)[0]
    for tenant, count in tenants(args)[:2]:
        require_filled(store, kind, Scope(tenant), count, queries, vector)


def search_figures(store: RecordStore, args: argparse.Namespace, scope: Scope) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    content = _ZIPF[100:] / _ZIPF[100:].sum()
    texts = [" ".join(rng.choice(WORDS[100:], size=4, p=content)) for _ in range(args.queries)]
    vectors = unit_vectors(rng, args.queries)

    def bm25(n: int) -> None:
        store.search_text(scope, Layer.L1, texts[n], Filters(), 50)

    def vector(n: int) -> None:
        store.search_vector(scope, Layer.L1, vectors[n], Filters(), 50)

    def hybrid(n: int) -> None:  # both lists as a search gathers them (alongside each other)
        candidate_lists(store, scope, SearchRequest(texts[n], layers=(Layer.L1,)), vectors[n],
                        50, HYBRID)  # fmt: skip

    for n in range(args.queries):  # a warm cache: the figures are of a tenant in use
        hybrid(n)
    return {"bm25": timed(bm25, args.queries), "vector": timed(vector, args.queries),
            "hybrid": timed(hybrid, args.queries)}  # fmt: skip


def index_figures(store: PostgresStore, args: argparse.Namespace) -> dict[str, Any]:
    """The large tenant's exact vector search, and recall@10 of the index path against it."""
    vectors = unit_vectors(np.random.default_rng(8), args.queries)

    def exact(n: int) -> None:
        with store.reading() as conn:
            vector_search.search(conn, BIG.tenant, Layer.L1, vectors[n], Filters(), 50)

    runs = min(args.queries, max(20, args.queries // 10))
    return {"exact_vector": timed(exact, runs),
            "recall_at_10_vs_exact": recall_vs_exact(store, BIG, vectors)}  # fmt: skip


def recall_vs_exact(store: PostgresStore, scope: Scope, vectors: np.ndarray) -> float:
    """recall@10 of the store's vector search (the tenant's index, or the cached scan of a
    tenant without one) against the exact search in SQL."""
    overlap: list[float] = []
    for query in vectors:
        found = store.search_vector(scope, Layer.L1, query, Filters(), 10)
        with store.reading() as conn:
            truth = vector_search.search(conn, scope.tenant, Layer.L1, query, Filters(), 10)
        overlap.append(len({c.id for c in found} & {c.id for c in truth}) / 10)
    return round(float(np.mean(overlap)), 4)


def sizes(url: str) -> dict[str, Any]:
    """What the vectors cost on disk, and whether the large tenant's scan uses its index."""
    name = index_name(BIG.tenant, Layer.L1)
    with psycopg.connect(url, autocommit=True) as conn:
        mb = conn.execute(
            "SELECT pg_total_relation_size('memories') / 1e6, pg_total_relation_size("
            "'memory_vectors') / 1e6, pg_relation_size(%s) / 1e6", (name,),
        ).fetchone()  # fmt: skip
        query = unit_vectors(np.random.default_rng(9), 1)[0]
        cursor = psycopg.ClientCursor(conn)
        with conn.transaction():
            cursor.execute(translate(vector_search.INDEX_SCAN_SETTINGS), ["100"])
            explain = "EXPLAIN " + vector_search.neighbours_sql(Layer.L1, DIM)
            text = vector_search.vector_text(query)
            plan = cursor.execute(translate(explain), [text, BIG.tenant, text, 100]).fetchall()
    return {"memories_mb": round(float(mb[0])), "memory_vectors_mb": round(float(mb[1])),
            "large_tenant_index_mb": round(float(mb[2] or 0)),
            "index_scan_used": any(name in str(row[0]) for row in plan)}  # fmt: skip


def postgres_filled(url: str, args: argparse.Namespace) -> bool:
    """Whether an earlier run filled this cache's PostgreSQL completely (a run that stopped
    while filling leaves tables with fewer rows: those are filled again from scratch)."""
    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('memories') IS NOT NULL").fetchone()
        if not (exists and exists[0]):
            return False
        held = conn.execute("SELECT COUNT(*) FROM memories").fetchone()
        if held and held[0] == sum(count for _, count in tenants(args)):
            return True
        conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return False


def ready_postgres(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Fill (unless an earlier run did) and index the large tenant; what it took."""
    took: dict[str, Any] = {}
    if not postgres_filled(url, args):
        started = time.perf_counter()
        fill_postgres(url, args)
        took["fill_s"] = round(time.perf_counter() - started, 1)
    store = PostgresStore(url, background_builds=False)
    try:
        started = time.perf_counter()
        store.vectors.build(BIG.tenant, Layer.L1)
        took["index_build_s"] = round(time.perf_counter() - started, 1)
    finally:
        store.close()
    return took


def started_server(root: Path, shared_buffers: str) -> Any:
    """pgserver's PostgreSQL on `root`, restarted if its `shared_buffers` is not the one asked."""
    import pgserver  # noqa: PLC0415 - the postgres extra

    server = pgserver.get_server(root, cleanup_mode="stop")
    with psycopg.connect(str(server.get_uri()), autocommit=True) as conn:
        current = conn.execute("SELECT setting::bigint * 8192 FROM pg_settings"
                               " WHERE name = 'shared_buffers'").fetchone()  # fmt: skip
        wanted = conn.execute("SELECT pg_size_bytes(%s)", (shared_buffers,)).fetchone()
        if current == wanted:
            return server
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'".encode())
    server.cleanup()
    return pgserver.get_server(root, cleanup_mode="stop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenant-rows", type=int, default=100_000)
    parser.add_argument("--total-rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/stratamem-pg-scale"))
    parser.add_argument("--shared-buffers", default="2GB",
                        help="PostgreSQL's page cache (its default, 128MB, holds a tenth of"
                             " the 1M-row tables)")  # fmt: skip
    args = parser.parse_args()
    cache = args.cache / f"{args.tenant_rows}-of-{args.total_rows}"
    cache.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"tenant_rows": args.tenant_rows, "total_rows": args.total_rows}
    lite = cache / "store.db"
    if not lite.exists():
        started = time.perf_counter()
        fill_sqlite(cache / "filling.db", args)
        (cache / "filling.db").rename(lite)
        figures["sqlite_fill_s"] = round(time.perf_counter() - started, 1)
    server = started_server(cache / "pg", args.shared_buffers)
    try:
        url = str(server.get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            figures["shared_buffers"] = conn.execute("SHOW shared_buffers").fetchone()[0]
        figures["postgres_ready"] = ready_postgres(url, args)
        figures["postgres_sizes"] = sizes(url)
        small = Scope("other0")
        for kind, store_url in (("sqlite", f"sqlite:{lite}"), ("postgres", url)):
            store = open_url(store_url, lite)
            try:
                check_filled(store, kind, args)
                store.search_text(BIG, Layer.L1, "warm", Filters(), 50)  # caches, plans
                figures[kind] = {"large_tenant": search_figures(store, args, BIG),
                                 "small_tenant": search_figures(store, args, small)}  # fmt: skip
                if isinstance(store, PostgresStore):
                    figures[kind]["large_tenant"].update(index_figures(store, args))
                    figures[kind]["small_tenant"]["recall_at_10_vs_exact"] = recall_vs_exact(
                        store, small, unit_vectors(np.random.default_rng(8), args.queries))
            finally:
                store.close()
        figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(figures, indent=2))
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
