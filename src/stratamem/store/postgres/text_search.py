"""BM25 in SQL over the PostgreSQL text index, scored as SQLite's FTS5 `bm25()` scores.

For each query phrase i found in a row: idf_i = ln((N - n_i + 0.5) / (n_i + 0.5)) (1e-6 when not
positive, also when rows committed after N was read make n_i > N), f_i = the phrase's count in
each field times the field's weight, summed, and the row scores
sum_i idf_i * f_i * (k1 + 1) / (f_i + k1 * (1 - b + b * D / avgdl)), k1 = 1.2, b = 0.75, D the
row's length. N, n_i and avgdl are the tenant's own (FTS5 counts N and avgdl over the whole
index, so one tenant alone in a store ranks the same on both; `test_ranking_parity.py`).
"""

from __future__ import annotations

from stratamem.domain import Layer
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.port import Candidate, Filters, TurnFieldWeights
from stratamem.store.core.text_query import indexed_terms
from stratamem.store.postgres.connection import PgConn, PgCursor
from stratamem.store.postgres.text_index import TERM_TABLES
from stratamem.store.postgres.tokens import Tokenizer

K1 = 1.2
B = 0.75
_RECORDS = {Layer.L0: "turns", Layer.L1: "memories"}


def query_keys(tokenizer: Tokenizer, tenant: str, query: str, phrases: bool) -> list[str]:
    """The index terms of the query's words and (with `phrases`) adjacent pairs, as
    `text_query.indexed_terms` names them, stemmed as the index holds them."""
    words = indexed_terms(tenant, query, phrases)
    return [" ".join(tokens) for tokens in tokenizer.query_tokens(words) if tokens]


def totals(conn: PgConn, tenant: str, layer: Layer) -> tuple[int, float]:
    row = conn.execute(
        "SELECT sum(rows), sum(tokens) FROM text_totals WHERE tenant = ? AND layer = ?",
        (tenant, layer.value),
    ).fetchone()
    return (0, 0.0) if row[0] is None else (int(row[0]), float(row[1]))


def discriminative(conn: PgConn, tenant: str, layer: Layer, keys: list[str], cap: int) -> list[str]:
    """The terms found in fewer than `cap` of the tenant's rows."""
    if not keys:
        return keys
    rows = conn.execute(
        f"SELECT term, count(*) FROM {TERM_TABLES[layer]} WHERE tenant = ? AND term = ANY(?)"
        " GROUP BY term",
        (tenant, sorted(set(keys))),
    ).fetchall()
    common = {row[0] for row in rows if int(row[1]) >= cap}
    return [key for key in keys if key not in common]


def ranked(
    conn: PgConn,
    tenant: str,
    layer: Layer,
    keys: list[str],
    filters: Filters,
    limit: int,
    fields: TurnFieldWeights | None,
) -> PgCursor | None:
    """The best `limit` rows (a cursor of id and score; None when nothing can match): one
    statement, the tenant's totals read in it, so that a caller can pipeline it.

    Its shape does not depend on the planner's statistics: each query term's postings are read
    through the index by tenant and term, once (`hits`, materialised), and each row found is
    looked up by `rid` (lateral subqueries that the planner cannot flatten into joins to
    reorder: an aggregate, `OFFSET 0`, `LIMIT 1`).
    Left free, a planner whose statistics predate the tenant's rows (a fresh table, analysed
    when it held another tenant's first rows, as autovacuum does) walked every current row of
    the tenant and read the postings again for each: 11.5 s instead of 1.9 ms a search over 750
    memories (`test_pg_bm25_plan.py`)."""
    if not keys or limit <= 0:
        return None
    terms, records = TERM_TABLES[layer], _RECORDS[layer]
    tail, params = filter_sql(layer, filters, "r")
    sql = (
        "WITH q AS (SELECT term FROM unnest(?::text[]) AS q(term)),"
        " t AS MATERIALIZED (SELECT sum(rows)::float8 AS n,"
        "  sum(tokens)::float8 / NULLIF(sum(rows), 0)::float8 AS avgdl"
        "  FROM text_totals WHERE tenant = ? AND layer = ?),"
        " df AS (SELECT u.term, d.n FROM (SELECT DISTINCT term FROM q) u CROSS JOIN LATERAL"
        f"  (SELECT count(*)::float8 AS n FROM {terms} p WHERE p.tenant = ? AND p.term = u.term)"
        "  d WHERE d.n > 0),"
        " idf AS (SELECT q.term,"
        "  GREATEST(ln(GREATEST((t.n - df.n + 0.5) / (df.n + 0.5), 1)), 1e-6) AS w"
        "  FROM q JOIN df ON df.term = q.term CROSS JOIN t WHERE t.n > 0),"
        f" hits AS MATERIALIZED (SELECT p.rid, idf.w, {_weighted(layer, fields)} AS f"
        f"  FROM idf CROSS JOIN LATERAL (SELECT p.rid, p.tf FROM {terms} p"
        "  WHERE p.tenant = ? AND p.term = idf.term OFFSET 0) p)"
        f" SELECT r.id, sum(h.w * h.f * {K1 + 1!r} / (h.f + {K1!r} * ({1 - B!r}"
        f"  + {B!r} * r.fts_len / (SELECT avgdl FROM t)))) AS score"
        f" FROM hits h CROSS JOIN LATERAL (SELECT r.rid, r.id, r.fts_len FROM {records} r"
        f"  WHERE r.rid = h.rid AND r.tenant = ?{tail} LIMIT 1) r"
        " GROUP BY r.rid, r.id ORDER BY score DESC, r.rid LIMIT ?"
    )
    return conn.execute(sql, [keys, tenant, layer.value, tenant, tenant, tenant, *params, limit])


def candidates(cursor: PgCursor | None) -> list[Candidate]:
    return (
        [] if cursor is None else [Candidate(id=r[0], score=float(r[1])) for r in cursor.fetchall()]
    )


def _weighted(layer: Layer, fields: TurnFieldWeights | None) -> str:
    if layer is Layer.L1:
        return "p.tf[1]"
    w = fields or TurnFieldWeights()
    weights = (w.text, w.speaker, w.context, w.around, w.dated)
    return " + ".join(f"p.tf[{i + 1}] * {float(v)!r}" for i, v in enumerate(weights))
