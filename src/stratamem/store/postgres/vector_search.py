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

from stratamem.domain import Layer
from stratamem.store.base import Candidate, Filters
from stratamem.store.filters_sql import filter_sql
from stratamem.store.postgres.connection import PgConn, translate, translated_errors
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
        rows = _neighbours(conn, tenant, layer, vector, filters, fetched, index.dim)
        kept: dict[str, float] = {}
        for _, score, record_id in rows:
            if record_id is not None:
                kept.setdefault(str(record_id), float(score))
        if len(kept) >= limit or len(rows) < fetched:
            return [Candidate(id=i, score=score) for i, score in kept.items()][:limit]
    return search_exact(conn, tenant, layer, vector, filters, limit)


def neighbours_sql(layer: Layer, dim: int) -> str:
    """The index scan (parameters: the query vector, the tenant, the vector again, the count).
    It is sent with the parameters bound in its text: the planner uses a partial index only for
    a query whose predicate it can prove implies the index's, as a literal tenant does."""
    distance = f"v.embedding::vector({dim}) <#> ?::vector({dim})"
    return (
        f"SELECT v.rid, v.seq, -({distance}) AS score FROM {VECTOR_TABLES[layer]} v"
        f" WHERE v.tenant = ? ORDER BY {distance} LIMIT ?"
    )


#: For the transaction: an HNSW scan yields up to `hnsw.ef_search` rows (raised to the rows
#: wanted), and no plan sorts the tenant's rows instead of scanning its index (the tenant is
#: large, whatever stale statistics say).
INDEX_SCAN_SETTINGS = (
    "SELECT set_config('hnsw.ef_search', ?, true), set_config('enable_sort', 'off', true)"
)


def _neighbours(
    conn: PgConn,
    tenant: str,
    layer: Layer,
    vector: np.ndarray,
    filters: Filters,
    count: int,
    dim: int,
) -> list[Any]:
    """The `count` nearest pieces by the tenant's index, best first, each with its record's id
    when the record passes the filters and still has that vector (else None). One round trip:
    the settings, the scan and the check are one script, bound on the client."""
    tail, params = filter_sql(layer, filters, "r")
    script = translate(
        f"BEGIN; {INDEX_SCAN_SETTINGS}; SELECT n.rid, n.score, r.id FROM"
        f" ({neighbours_sql(layer, dim)}) n LEFT JOIN {RECORD_TABLES[layer]} r"
        f" ON r.rid = n.rid AND r.emb_seq = n.seq AND r.tenant = ?{tail}"
        " ORDER BY n.score DESC, n.rid; COMMIT"
    )
    text = vector_text(vector)
    bound = [str(max(EF_SEARCH_MIN, count)), text, tenant, text, count, tenant, *params]
    cursor = psycopg.ClientCursor(conn.raw)
    with translated_errors():
        cursor.execute(script, bound)
        rows: list[Any] = []
        while True:
            if cursor.description is not None and len(cursor.description) == 3:
                rows = cursor.fetchall()
            if not cursor.nextset():
                return rows
