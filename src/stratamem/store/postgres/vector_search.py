"""Vector search on pgvector, exact within the tenant whatever else the table holds.

Both ways take the nearest vectors (pieces) of the tenant first, then keep each record's best
piece among them when the record passes the filters and still has that vector; when that leaves
too few records and more pieces were there, they take more, then every vector of the tenant
joined to its record (`search_all`):

- exactly, without an index: the tenant's vectors found through the index on `tenant`, scored
  in SQL, the nearest kept by a top-N sort. The pieces taken first are exactly the nearest, so
  the records kept are exactly the best that pass. The store searches a tenant without an
  index of its own on its vectors cached in the process instead (`PostgresStore.search_vector`:
  pgvector scores about a vector a microsecond); this is the truth its recall is measured by.
- through the tenant's own HNSW index (`vector_index.py`): a partial index holding only that
  tenant's vectors, so the approximate scan never spends its candidates on another tenant's
  vectors (a global index filtered by tenant would: pgvector 0.6 has no iterative index scan, an
  HNSW scan yields at most `hnsw.ef_search` rows, then the filter drops them).

Scores are inner products (the embeddings are unit vectors: cosine), as the SQLite store's scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from stratamem.domain import Layer
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.port import Candidate, Filters
from stratamem.store.postgres.connection import PgConn, translate, translated_errors
from stratamem.store.postgres.vector_rows import RECORD_TABLES, VECTOR_TABLES, vector_text

#: Pieces taken per wanted record (times the pieces per record): first the few that usually
#: suffice, then more when the filters left too few, then every vector of the tenant.
OVERFETCH = (2, 8)
#: Pieces per record assumed (the least, for a tenant whose index recorded its own).
PIECES_PER_RECORD = {Layer.L0: 3.0, Layer.L1: 1.0}
#: The least `hnsw.ef_search` (pgvector's default is 40); it is raised to the rows fetched,
#: since a scan returns at most that many.
EF_SEARCH_MIN = 100


@dataclass(frozen=True)
class AnnIndex:
    """A tenant's built HNSW index: its dimension and its pieces per record when built."""

    dim: int
    pieces_per_record: float


def search(
    conn: PgConn,
    tenant: str,
    layer: Layer,
    vector: np.ndarray,
    filters: Filters,
    limit: int,
    index: AnnIndex | None = None,
) -> list[Candidate]:
    """The `limit` records of the tenant whose best vector is nearest, passing the filters;
    through `index` when given."""
    if limit <= 0:
        return []
    pieces = PIECES_PER_RECORD[layer]
    if index is not None:  # measured when built (from the first vectors, for a low threshold)
        pieces = max(pieces, index.pieces_per_record)
    for factor in OVERFETCH:
        fetched = int(limit * max(1.0, pieces) * factor)
        rows = _nearest(conn, tenant, layer, vector, filters, fetched, index)
        kept: dict[str, float] = {}
        for _, score, record_id in rows:
            if record_id is not None:
                kept.setdefault(str(record_id), float(score))
        if len(kept) >= limit or len(rows) < fetched:
            return [Candidate(id=i, score=score) for i, score in kept.items()][:limit]
    return search_all(conn, tenant, layer, vector, filters, limit)


def search_all(
    conn: PgConn, tenant: str, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
) -> list[Candidate]:
    """Every vector of the tenant scored and joined to its record (the filters rule out most
    of them: the nearest pieces alone left too few). One round trip: the setting and the
    search are one script, bound on the client."""
    tail, params = filter_sql(layer, filters, "r")
    bound = [vector_text(vector), tenant, int(vector.shape[0]), tenant, *params, limit]
    found = _scripted(conn, all_vectors_script(layer, tail), bound)
    return [Candidate(id=row[0], score=float(row[1])) for row in found]


def all_vectors_script(layer: Layer, tail: str) -> str:
    """`all_vectors_sql` in a transaction of its own, under `ALL_VECTORS_SETTINGS`."""
    return f"BEGIN; {ALL_VECTORS_SETTINGS}; {all_vectors_sql(layer, tail)}; COMMIT"


def all_vectors_sql(layer: Layer, tail: str) -> str:
    """Every vector of the tenant scored, each record's best that passes the filters (`tail`,
    on `r`), the `limit` best records (parameters: the query vector, the tenant, its
    dimension, the tenant, the filters', the limit).

    Scores first, in a materialised step: the rows grouped afterwards are narrow (left to
    itself, the planner sorts the vectors themselves by record, spilling to disk)."""
    return (
        "WITH d AS MATERIALIZED (SELECT v.rid, v.seq, -(v.embedding <#> ?::vector) AS score"
        f" FROM {VECTOR_TABLES[layer]} v WHERE v.tenant = ? AND vector_dims(v.embedding) = ?)"
        f" SELECT r.id, max(d.score) AS score FROM d JOIN {RECORD_TABLES[layer]} r"
        f" ON r.rid = d.rid AND r.emb_seq = d.seq WHERE r.tenant = ?{tail}"
        " GROUP BY r.rid, r.id ORDER BY score DESC, r.rid LIMIT ?"
    )


#: For the transaction of `all_vectors_sql`: the vectors are joined to the records by hash or
#: merge, never by a nested loop. A planner whose statistics know nothing of the tenant's rows
#: (never analysed, or analysed while another tenant's first rows were there) expected one row
#: on each side and compared every vector with every record of the tenant: 258 ms instead of 5
#: for 3,000 memories (`bench/pg_vector_plan.py`).
ALL_VECTORS_SETTINGS = "SELECT set_config('enable_nestloop', 'off', true)"


def neighbours_sql(layer: Layer, dim: int, indexed: bool = True) -> str:
    """The scan of the tenant's nearest pieces (parameters: the query vector, the tenant, the
    vector again, the count). Through the tenant's index it casts to the index's dimension and
    is sent with the parameters bound in its text: the planner uses a partial index only for a
    query whose predicate it can prove implies the index's, as a literal tenant does."""
    if indexed:
        distance = f"v.embedding::vector({dim}) <#> ?::vector({dim})"
        where = "v.tenant = ?"
    else:
        distance = "v.embedding <#> ?::vector"
        where = f"v.tenant = ? AND vector_dims(v.embedding) = {int(dim)}"
    return (
        f"SELECT v.rid, v.seq, -({distance}) AS score FROM {VECTOR_TABLES[layer]} v"
        f" WHERE {where} ORDER BY {distance} LIMIT ?"
    )


def nearest_sql(layer: Layer, dim: int, indexed: bool, tail: str) -> str:
    """The tenant's nearest pieces, each with its record's id when the record passes the
    filters (`tail`, on `r`) and still has that vector, else NULL (parameters: those of
    `neighbours_sql`, the tenant, the filters').

    Each piece's record is looked up by `rid` alone, in a subquery the planner cannot merge
    into the join (`OFFSET 0`) nor push the other conditions into: left free, a planner whose
    statistics predate the tenant's rows (a table analysed while it held another tenant's
    first rows, as autovacuum does) joined every piece to an unparameterised scan of the
    tenant's records, 9 ms instead of 2 over 750 memories (`test_pg_vector_plan.py`)."""
    return (
        f"SELECT n.rid, n.score, r.id FROM ({neighbours_sql(layer, dim, indexed)}) n"
        f" LEFT JOIN LATERAL (SELECT * FROM {RECORD_TABLES[layer]} r WHERE r.rid = n.rid"
        f" OFFSET 0) r ON r.emb_seq = n.seq AND r.tenant = ?{tail}"
        " ORDER BY n.score DESC, n.rid"
    )


#: For the transaction: an HNSW scan yields up to `hnsw.ef_search` rows (raised to the rows
#: wanted), and no plan sorts the tenant's rows instead of scanning its index (the tenant is
#: large, whatever stale statistics say).
INDEX_SCAN_SETTINGS = (
    "SELECT set_config('hnsw.ef_search', ?, true), set_config('enable_sort', 'off', true)"
)


def _nearest(
    conn: PgConn,
    tenant: str,
    layer: Layer,
    vector: np.ndarray,
    filters: Filters,
    count: int,
    index: AnnIndex | None,
) -> list[Any]:
    """The tenant's `count` nearest pieces, best first, each with its record's id when the
    record passes the filters and still has that vector (else None). One round trip: the
    settings, the scan and the check are one script, bound on the client."""
    tail, params = filter_sql(layer, filters, "r")
    select = nearest_sql(layer, int(vector.shape[0]), index is not None, tail)
    text = vector_text(vector)
    bound: list[Any] = [text, tenant, text, count, tenant, *params]
    if index is not None:
        select = f"BEGIN; {INDEX_SCAN_SETTINGS}; {select}; COMMIT"
        bound.insert(0, str(max(EF_SEARCH_MIN, count)))
    return _scripted(conn, select, bound)


def _scripted(conn: PgConn, script: str, bound: list[Any]) -> list[Any]:
    """Run `script` (statements separated by `;`) in one round trip, its parameters bound on
    the client; the rows of its last statement that returns rows."""
    cursor = psycopg.ClientCursor(conn.raw)
    with translated_errors():
        cursor.execute(translate(script), bound)
        return last_rows(cursor)


def last_rows(cursor: psycopg.ClientCursor[Any]) -> list[Any]:
    """The rows of the last statement of an executed script that returns rows."""
    rows: list[Any] = []
    while True:
        if cursor.description is not None:
            rows = cursor.fetchall()
        if not cursor.nextset():
            return rows
