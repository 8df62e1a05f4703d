"""BM25 and vector retrieval over the SQLite tables, tenant-scoped."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from stratamem.domain import Layer
from stratamem.retrieval.fts_query import match_expression
from stratamem.store.base import Candidate, Filters
from stratamem.store.sqlite.filters import filter_sql
from stratamem.store.sqlite.turn_context import BM25_WEIGHTS
from stratamem.store.vectors import VectorCache

TABLES = {Layer.L0: "turns", Layer.L1: "memories"}
#: Arguments of bm25() after the table name: the weight of each indexed column.
_WEIGHTS = {Layer.L0: "".join(f", {w}" for w in BM25_WEIGHTS), Layer.L1: ""}
# How many vector neighbours to take before filtering, per wanted result.
_OVERFETCH = 4


def search_text(
    conn: sqlite3.Connection, tenant: str, layer: Layer, query: str, filters: Filters, limit: int
) -> list[Candidate]:
    expression = match_expression(query)
    if expression is None or limit <= 0:
        return []
    table = TABLES[layer]
    tail, params = filter_sql(layer, filters, "r")
    sql = (
        f"SELECT r.id, bm25({table}_fts{_WEIGHTS[layer]}) AS rank FROM {table}_fts"
        f" JOIN {table} r ON r.rid = {table}_fts.rowid"
        f" WHERE {table}_fts MATCH ? AND r.tenant = ?{tail}"
        " ORDER BY rank LIMIT ?"
    )
    rows = conn.execute(sql, [expression, tenant, *params, limit]).fetchall()
    return [Candidate(id=row[0], score=-float(row[1])) for row in rows]


def refresh_cache(
    conn: sqlite3.Connection, cache: VectorCache, tenant: str, layer: Layer
) -> None:
    """Load the vectors written since the cache last looked."""
    table = TABLES[layer]
    rows = conn.execute(
        f"SELECT rid, embedding, emb_seq FROM {table}"
        " WHERE tenant = ? AND emb_seq > ? ORDER BY emb_seq",
        (tenant, cache.max_seq),
    ).fetchall()
    if rows:
        cache.add([r[0] for r in rows], [r[1] for r in rows], max(r[2] for r in rows))


def search_vector(
    conn: sqlite3.Connection,
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
    kept = _filtered(conn, tenant, layer, filters, nearest)
    if len(kept) >= limit or len(nearest) < limit * _OVERFETCH:
        return kept[:limit]
    allowed = _allowed_rids(conn, tenant, layer, filters)
    return _filtered(conn, tenant, layer, filters, cache.top(vector, limit, allowed))[:limit]


def _filtered(
    conn: sqlite3.Connection,
    tenant: str,
    layer: Layer,
    filters: Filters,
    nearest: list[tuple[int, float]],
) -> list[Candidate]:
    if not nearest:
        return []
    table = TABLES[layer]
    tail, params = filter_sql(layer, filters, "r")
    marks = ", ".join("?" for _ in nearest)
    rows = conn.execute(
        f"SELECT r.rid, r.id FROM {table} r WHERE r.tenant = ? AND r.rid IN ({marks}){tail}",
        [tenant, *(rid for rid, _ in nearest), *params],
    ).fetchall()
    ids = {row[0]: row[1] for row in rows}
    return [Candidate(id=ids[rid], score=score) for rid, score in nearest if rid in ids]


def _allowed_rids(
    conn: sqlite3.Connection, tenant: str, layer: Layer, filters: Filters
) -> np.ndarray:
    table = TABLES[layer]
    tail, params = filter_sql(layer, filters, "r")
    params_all: list[Any] = [tenant, *params]
    rows = conn.execute(f"SELECT r.rid FROM {table} r WHERE r.tenant = ?{tail}", params_all)
    return np.fromiter((row[0] for row in rows), dtype=np.int64)
