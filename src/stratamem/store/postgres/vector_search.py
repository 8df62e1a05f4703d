"""Vector search on pgvector, exact within the tenant whatever else the table holds.

A tenant's vectors are searched exactly (every vector of the tenant, through the index on
`tenant`, scored in SQL) until the tenant has its own HNSW index (`vector_index.py`): a partial
index holding only that tenant's vectors, so an approximate scan never spends its candidates on
another tenant's vectors (a global index filtered by tenant would: pgvector 0.6 has no iterative
index scan, an HNSW scan yields at most `hnsw.ef_search` rows, then the filter drops them). The
index's neighbours are over-fetched, grouped by record (best piece), checked against the filters
and the records' current vectors, and an exact search runs instead when too few survive.

Scores are inner products (the embeddings are unit vectors: cosine), as the SQLite store's scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from stratamem.domain import Layer
from stratamem.store.base import Candidate, Filters
from stratamem.store.filters_sql import filter_sql
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.vector_rows import RECORD_TABLES, VECTOR_TABLES, vector_text

#: Index neighbours fetched per wanted record (times the tenant's pieces per record): first
#: the few that usually suffice, then more when the filters left too few, then the exact search.
OVERFETCH = (2, 8)
#: The least `hnsw.ef_search` (pgvector's default is 40); it is raised to the rows fetched,
#: since a scan returns at most that many.
EF_SEARCH_MIN = 100


@dataclass(frozen=True)
class AnnIndex:
    """A tenant's built HNSW index: its dimension and its pieces per record when built."""

    dim: int
    pieces_per_record: float


def search_exact(
    conn: PgConn, tenant: str, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
) -> list[Candidate]:
    """The `limit` records of the tenant whose best vector is nearest, passing the filters."""
    if limit <= 0:
        return []
    tail, params = filter_sql(layer, filters, "r")
    found = conn.execute(
        "SELECT r.id, max(-(v.embedding <#> ?::vector)) AS score"
        f" FROM {VECTOR_TABLES[layer]} v JOIN {RECORD_TABLES[layer]} r"
        "  ON r.rid = v.rid AND r.emb_seq = v.seq"
        f" WHERE v.tenant = ? AND vector_dims(v.embedding) = ? AND r.tenant = ?{tail}"
        " GROUP BY r.rid, r.id ORDER BY score DESC, r.rid LIMIT ?",
        [vector_text(vector), tenant, int(vector.shape[0]), tenant, *params, limit],
    ).fetchall()
    return [Candidate(id=row[0], score=float(row[1])) for row in found]


def search_ann(
    conn: PgConn,
    tenant: str,
    layer: Layer,
    vector: np.ndarray,
    filters: Filters,
    limit: int,
    index: AnnIndex,
) -> list[Candidate]:
    """Through the tenant's HNSW index; exact when the index's neighbours leave too few."""
    if limit <= 0:
        return []
    for factor in OVERFETCH:
        fetched = int(limit * max(1.0, index.pieces_per_record) * factor)
        nearest = _neighbours(conn, tenant, layer, vector, fetched, index.dim)
        best: dict[int, tuple[int, float]] = {}
        for rid, seq, score in nearest:
            best.setdefault(int(rid), (int(seq), float(score)))
        kept = _filtered(conn, tenant, layer, filters, best)
        if len(kept) >= limit or len(nearest) < fetched:
            return kept[:limit]
    return search_exact(conn, tenant, layer, vector, filters, limit)


def neighbours_sql(tenant: str, layer: Layer, dim: int) -> sql.Composed:
    """The index search's query (parameters: the query vector twice, the count). The tenant is
    a literal in its text: the planner uses a partial index only for a query whose predicate it
    can prove implies the index's, which it cannot for a parameter of a generic plan."""
    return sql.SQL(
        "SELECT v.rid, v.seq, -(v.embedding::vector({dim}) <#> %s::vector({dim})) AS score"
        " FROM {table} v WHERE v.tenant = {tenant}"
        " ORDER BY v.embedding::vector({dim}) <#> %s::vector({dim}) LIMIT %s"
    ).format(
        dim=sql.Literal(dim), table=sql.Identifier(VECTOR_TABLES[layer]),
        tenant=sql.Literal(tenant),
    )  # fmt: skip


def _neighbours(
    conn: PgConn, tenant: str, layer: Layer, vector: np.ndarray, count: int, dim: int
) -> list[Any]:
    """The `count` nearest pieces by the tenant's index, best first (an HNSW scan yields at
    most `hnsw.ef_search` rows: it is raised to `count`)."""
    text = vector_text(vector)
    with conn.raw.transaction():
        set_index_scan(conn.raw, count)
        return conn.raw.execute(neighbours_sql(tenant, layer, dim), (text, text, count)).fetchall()


def set_index_scan(raw: psycopg.Connection[Any], count: int) -> None:
    """For the transaction: HNSW scans yield `count` rows, and no plan sorts the tenant's rows
    instead of scanning its index (the tenant is large, whatever stale statistics say)."""
    raw.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true)",
        (str(max(EF_SEARCH_MIN, count)),),
    )


def _filtered(
    conn: PgConn, tenant: str, layer: Layer, filters: Filters, best: dict[int, tuple[int, float]]
) -> list[Candidate]:
    """The neighbours whose record passes the filters and still has the vector found."""
    if not best:
        return []
    tail, params = filter_sql(layer, filters, "r")
    rows = conn.execute(
        f"SELECT r.rid, r.id, r.emb_seq FROM {RECORD_TABLES[layer]} r"
        f" WHERE r.tenant = ? AND r.rid = ANY(?){tail}",
        [tenant, list(best), *params],
    ).fetchall()
    ids = {int(row[0]): row[1] for row in rows if row[2] == best[int(row[0])][0]}
    ranked = sorted(best.items(), key=lambda item: (-item[1][1], item[0]))
    return [Candidate(id=ids[rid], score=score) for rid, (_, score) in ranked if rid in ids]
