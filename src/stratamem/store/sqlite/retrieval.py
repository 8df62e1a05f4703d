"""BM25 retrieval over the SQLite tables, tenant-scoped (vectors: `store/core/vector_search.py`)."""

from __future__ import annotations

import sqlite3

from stratamem.domain import Layer
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.fts_query import terms_expression
from stratamem.store.core.port import Candidate, Filters
from stratamem.store.core.scope_tokens import scope_match
from stratamem.store.core.text_query import TextQuery
from stratamem.store.sqlite import turn_context

TABLES = {Layer.L0: "turns", Layer.L1: "memories"}
# Columns a query's words are matched against.
TEXT_COLUMNS = {Layer.L0: turn_context.TEXT_COLUMNS, Layer.L1: "content"}
# The BM25 weights of the memories' index: its content, and the scope column (weighted 0: it
# only selects).
MEMORY_RANKING = "bm25(1.0, 0.0)"


def search_text(
    conn: sqlite3.Connection, tenant: str, layer: Layer, query: TextQuery, tenant_rows: int
) -> list[Candidate]:
    """BM25 over the tenant's rows, by whichever of two plans walks fewer postings.

    Restricting by the tenant's scope token inside FTS5 costs a walk over all the tenant's rows;
    matching the words in the whole index and joining to check the tenant costs a walk over the
    rows that match anywhere. A capped count of the latter picks the cheaper plan; both give the
    same answer. With `max_share` (`max_rows`), words found in more than that share of the
    tenant's rows (in that many rows or more) are left out first (they rank little and cost a
    walk over most rows). With `phrases`, adjacent pairs of the query's words are searched as
    phrases beside the words. A turn's fields are weighted by `fields`
    (`turn_context.ranking`).
    """
    terms = query.terms(tenant)
    if query.leaves_common_out:
        terms = _discriminative(conn, layer, terms, query.common_cap(tenant_rows))
    expression = terms_expression(terms)
    if expression is None or query.limit <= 0:
        return []
    words = f"{{{TEXT_COLUMNS[layer]}}} : ({expression})"
    ranking = turn_context.ranking(query.fields) if layer is Layer.L0 else MEMORY_RANKING
    filters, limit = query.filters, query.limit
    if _match_count(conn, TABLES[layer], words, cap=tenant_rows) < tenant_rows:
        return _ranked(conn, tenant, layer, (words, ranking), filters, limit, False)
    scoped = f"({scope_match(layer, tenant, filters)}) AND {words}"
    return _ranked(conn, tenant, layer, (scoped, ranking), filters, limit, True)


def _discriminative(
    conn: sqlite3.Connection, layer: Layer, terms: list[str], cap: int
) -> list[str]:
    """The terms matching fewer than `cap` rows of the index (counting stops at the cap)."""
    table = TABLES[layer]
    return [
        term
        for term in terms
        if _match_count(
            conn, table, f"{{{TEXT_COLUMNS[layer]}}} : ({terms_expression([term])})", cap
        )
        < cap
    ]


def _match_count(conn: sqlite3.Connection, table: str, match: str, cap: int) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {table}_fts WHERE {table}_fts MATCH ? LIMIT ?)",
        (match, cap),
    ).fetchone()
    return int(row[0])


def _ranked(
    conn: sqlite3.Connection,
    tenant: str,
    layer: Layer,
    match_and_ranking: tuple[str, str],
    filters: Filters,
    limit: int,
    current_checked: bool,
) -> list[Candidate]:
    table = TABLES[layer]
    match, ranking = match_and_ranking
    tail, params = filter_sql(layer, filters, "r", current_checked=current_checked)
    sql = (
        f"SELECT r.id, {table}_fts.rank FROM {table}_fts"
        f" JOIN {table} r NOT INDEXED ON r.rid = {table}_fts.rowid"
        f" WHERE {table}_fts MATCH ? AND {table}_fts.rank MATCH ? AND r.tenant = ?{tail}"
        f" ORDER BY {table}_fts.rank LIMIT ?"
    )
    rows = conn.execute(sql, [match, ranking, tenant, *params, limit]).fetchall()
    return [Candidate(id=row[0], score=-float(row[1])) for row in rows]
