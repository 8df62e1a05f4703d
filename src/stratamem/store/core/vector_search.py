"""Vector retrieval over a tenant's cached vectors (`vectors.py`), checked against the rows.

The SQLite store's (the PostgreSQL store searches on pgvector: `postgres/vector_search.py`):
the cache of a (tenant, layer) catches up by the `emb_seq` each vector write stamps, and every
hit is checked against its row (tenant, filters, a vector still present), so a cache holding
vectors of erased or re-embedded rows returns none.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratamem.domain import Layer
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.port import Candidate, Filters
from stratamem.store.core.vectors import VectorCache
from stratamem.store.sql import SqlConn

TABLES = {Layer.L0: "turns", Layer.L1: "memories"}
# How many vector neighbours to take before filtering, per wanted result.
_OVERFETCH = 4


def refresh_cache(conn: SqlConn, cache: VectorCache, tenant: str, layer: Layer) -> None:
    """Load the vectors written since the cache last looked."""
    add_new_vectors(cache, ask_new_vectors(conn, tenant, layer, cache.max_seq).fetchall())


def ask_new_vectors(conn: SqlConn, tenant: str, layer: Layer, since_seq: int) -> Any:
    """The query of the tenant's vectors written after `since_seq` (a cursor: on PostgreSQL,
    sent in a pipeline with the search's other first question, `PostgresStore.search_vector`)."""
    return conn.execute(
        f"SELECT rid, embedding, emb_seq FROM {TABLES[layer]}"
        " WHERE tenant = ? AND emb_seq > ? ORDER BY emb_seq",
        (tenant, since_seq),
    )


@dataclass(frozen=True)
class NewVectors:
    """The vectors a cache lacked (`rows`, written after `since`), read for `cache` beside
    another question (`PostgresStore.search_vector`)."""

    cache: VectorCache
    since: int
    rows: list[Any]


def add_new_vectors(cache: VectorCache, rows: list[Any]) -> None:
    """Put the rows `ask_new_vectors` read into the cache."""
    if rows:
        cache.add([r[0] for r in rows], [r[1] for r in rows], max(r[2] for r in rows))


def search_vector(
    conn: SqlConn,
    cache: VectorCache,
    tenant: str,
    layer: Layer,
    vector: np.ndarray,
    filters: Filters,
    limit: int,
) -> list[Candidate]:
    """Scan all vectors, then keep those passing the filters; rescan restricted if too few."""
    if limit <= 0:
        return []
    nearest = cache.top(vector, limit * _OVERFETCH)
    kept = _first_passing(conn, tenant, layer, filters, nearest, limit)
    if len(kept) >= limit or len(nearest) < limit * _OVERFETCH:
        return kept[:limit]
    allowed = _allowed_rids(conn, tenant, layer, filters)
    return _filtered(conn, tenant, layer, filters, cache.top(vector, limit, allowed))[:limit]


def _first_passing(
    conn: SqlConn,
    tenant: str,
    layer: Layer,
    filters: Filters,
    nearest: list[tuple[int, float]],
    limit: int,
) -> list[Candidate]:
    """`nearest` whose rows pass, in order, at least the first `limit` of them if there are
    that many. The best `limit` are checked alone first: mostly they all pass (the overfetch is
    for filters and for rows erased, replaced or re-embedded since the cache read them), and
    checking all four times as many rows was most of a small tenant's vector search."""
    head = _filtered(conn, tenant, layer, filters, nearest[:limit])
    if len(head) == len(nearest[:limit]):
        return head
    return head + _filtered(conn, tenant, layer, filters, nearest[limit:])


def _filtered(
    conn: SqlConn,
    tenant: str,
    layer: Layer,
    filters: Filters,
    nearest: list[tuple[int, float]],
) -> list[Candidate]:
    if not nearest:
        return []
    table = TABLES[layer]
    tail, params = filter_sql(layer, filters, "r")
    rids = [rid for rid, _ in nearest]
    among, bound = _among(conn, rids)
    # A row without a vector cannot own a cached one: its rid is a deleted row's, reused (the
    # cache keeps vectors of erased rows until the process ends).
    rows = conn.execute(
        f"SELECT r.rid, r.id FROM {table} r{_hint(conn)}"
        f" WHERE r.tenant = ? AND r.rid {among} AND r.emb_seq IS NOT NULL{tail}",
        [tenant, *bound, *params],
    ).fetchall()
    ids = {row[0]: row[1] for row in rows}
    return [Candidate(id=ids[rid], score=score) for rid, score in nearest if rid in ids]


def _allowed_rids(
    conn: SqlConn, tenant: str, layer: Layer, filters: Filters
) -> np.ndarray:
    table = TABLES[layer]
    tail, params = filter_sql(layer, filters, "r")
    params_all: list[Any] = [tenant, *params]
    rows = conn.execute(f"SELECT r.rid FROM {table} r WHERE r.tenant = ?{tail}", params_all)
    return np.fromiter((row[0] for row in rows.fetchall()), dtype=np.int64)


def _among(conn: SqlConn, rids: list[int]) -> tuple[str, list[Any]]:
    """`IN (?, ...)` on SQLite; one array parameter elsewhere (PostgreSQL planned a list of
    200 values in 6 ms at load 12, issue 32)."""
    if isinstance(conn, sqlite3.Connection):
        return f"IN ({', '.join('?' for _ in rids)})", rids
    return "= ANY(?)", [rids]


def _hint(conn: SqlConn) -> str:
    """SQLite looks rows up by rid faster told not to use the tenant's index."""
    return " NOT INDEXED" if isinstance(conn, sqlite3.Connection) else ""
