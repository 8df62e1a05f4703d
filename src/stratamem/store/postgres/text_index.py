"""The PostgreSQL text index: each row's terms with their count per field, and per-tenant totals.

A term is one token (`tokens.py`) or two adjacent tokens of the same field ("grand open"), so
a query's phrases of two words are looked up like words. Words are prefixed with the tenant's
code as in the SQLite index (`store/core/tenant_words.py`), and terms, document frequencies,
row counts and lengths are all the tenant's own: one tenant's writes never move another's scores.

Fields of a turn: its text, speaker, the previous turn (`context`), the turn before that and the
next one (`around`), its date in words (`dated`), as `store/sqlite/turn_context.py`. A memory has
one field, its content. A row's length counts every field plus its scope tokens (one for a
turn, two for a memory), as the SQLite index counts its scope column.

A capture indexes its turns (and the turn before them) in its own transaction
(`index_session_tail`). Other writes mark rows (`fts_dirty`), and the store's catch-up indexes a
tenant's marked rows (after a write of memories, and before each search), so any writer of the
tables (the shared layer records included) keeps the index right. The tenant's totals are kept
in `TOTAL_SHARDS` rows that a reader sums (`text_search.totals`).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from stratamem.domain import Layer
from stratamem.store.core.tenant_words import tenant_words
from stratamem.store.postgres.connection import PgConn, PgCursor
from stratamem.store.postgres.tokens import Tokenizer

TERM_TABLES = {Layer.L0: "turn_terms", Layer.L1: "memory_terms"}
SCOPE_TOKENS = {Layer.L0: 1, Layer.L1: 2}
BATCH_ROWS = 500
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
#: Shards of a tenant's totals: concurrent captures (of different sessions) each add to their
#: own row instead of queueing for one; a reader sums them.
TOTAL_SHARDS = 64
TURN_FIELDS = (
    "SELECT t.rid, t.fts_len, t.text, t.speaker, p1.text, p2.text, n1.text, t.ts FROM turns t"
    " LEFT JOIN turns p1 ON p1.tenant = t.tenant AND p1.session = t.session AND p1.seq = t.seq - 1"
    " LEFT JOIN turns p2 ON p2.tenant = t.tenant AND p2.session = t.session AND p2.seq = t.seq - 2"
    " LEFT JOIN turns n1 ON n1.tenant = t.tenant AND n1.session = t.session AND n1.seq = t.seq + 1"
)
_MEMORY_FIELDS = "SELECT t.rid, t.fts_len, t.content FROM memories t"
_DIRTY = " WHERE t.tenant = ? AND t.fts_dirty ORDER BY t.rid LIMIT ?"


def date_words(ts: float) -> str | None:
    """'8 May 2023' (UTC), as the SQLite index's `dated` field (None for a time no calendar
    date stands for, as SQLite's `strftime` gives NULL)."""
    try:
        day = dt.datetime.fromtimestamp(ts, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def has_dirty(conn: PgConn, tenant: str, layer: Layer) -> bool:
    return bool(dirty(conn, tenant, layer).fetchone()[0])


def dirty(conn: PgConn, tenant: str, layer: Layer) -> PgCursor:
    """A cursor of one row: whether the tenant has rows of `layer` waiting to be indexed."""
    table = "turns" if layer is Layer.L0 else "memories"
    return conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM {table} WHERE tenant = ? AND fts_dirty)", (tenant,)
    )


def index_batch(conn: PgConn, tokenizer: Tokenizer, tenant: str, layer: Layer) -> int:
    """Index up to `BATCH_ROWS` marked rows of the tenant (inside the caller's transaction,
    which holds the tenant's lock); returns how many."""
    sql = (TURN_FIELDS if layer is Layer.L0 else _MEMORY_FIELDS) + _DIRTY
    rows = conn.execute(sql, (tenant, BATCH_ROWS)).fetchall()
    index_rows(conn, tokenizer, tenant, layer, rows, shard=0)
    return len(rows)


def index_rows(
    conn: PgConn,
    tokenizer: Tokenizer,
    tenant: str,
    layer: Layer,
    rows: Sequence[Any],
    shard: int,
) -> None:
    """Index `rows` (read by `TURN_FIELDS` or `_MEMORY_FIELDS`), their old terms replaced; the
    totals change in shard `shard` (of `TOTAL_SHARDS`)."""
    if not rows:
        return
    docs = [fields(tenant, layer, row) for row in rows]
    tokens = tokenizer.tokens(docs)
    table = TERM_TABLES[layer]
    rids = [int(row[0]) for row in rows]
    if any(row[1] is not None for row in rows):  # indexed before: its old terms go
        conn.execute(f"DELETE FROM {table} WHERE rid = ANY(?)", (rids,))
    conn.execute(
        f"INSERT INTO {table} (tenant, term, rid, tf) SELECT ?, u.term, u.rid, u.tf::real[]"
        " FROM unnest(?::text[], ?::bigint[], ?::text[]) AS u(term, rid, tf)",
        (tenant, *postings(rids, tokens)),
    )
    lengths = [row_length(layer, columns) for columns in tokens]
    _write_lengths(conn, tenant, layer, rows, lengths, shard % TOTAL_SHARDS)


def postings(rids: Sequence[int], tokens: Sequence[Sequence[Sequence[str]]]) -> tuple[str, ...]:
    """The rows' terms, as three array literals (for `unnest`): term, row id, counts per field
    (one literal of an array each). Built here, in one string each: psycopg would adapt a
    list element by element, which costs a capture more than the rest of its indexing."""
    names: list[str] = []
    term_rids: list[str] = []
    counts: list[str] = []
    for rid, columns in zip(rids, tokens, strict=True):
        for term, per_field in terms(columns).items():
            names.append(term)
            term_rids.append(str(rid))
            counts.append(array_literal(per_field))
    return text_array(names), "{" + ",".join(term_rids) + "}", text_array(counts)


def row_length(layer: Layer, columns: Sequence[Sequence[str]]) -> int:
    """A row's length in the index: its fields' tokens and its scope tokens."""
    return sum(len(c) for c in columns) + SCOPE_TOKENS[layer]


def array_literal(counts: Sequence[float]) -> str:
    """The literal of an array of counts (whole numbers)."""
    return "{" + ",".join(str(int(c)) for c in counts) + "}"


def text_array(values: Sequence[str]) -> str:
    """A PostgreSQL `text[]` literal of `values`."""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def fields(tenant: str, layer: Layer, row: Any) -> list[str | None]:
    if layer is Layer.L1:
        return [tenant_words(tenant, row[2])]
    text, speaker, before, earlier, after, ts = row[2:8]
    return [
        tenant_words(tenant, text),
        tenant_words(tenant, speaker),
        tenant_words(tenant, before or ""),
        tenant_words(tenant, around(earlier, after)),
        tenant_words(tenant, date_words(float(ts))),
    ]


def around(earlier: str | None, after: str | None) -> str:
    """A turn's `around` field: the turn before its previous one, and the next one."""
    return f"{earlier or ''} {after or ''}".strip()


def terms(columns: Sequence[Sequence[str]]) -> dict[str, list[float]]:
    """Each term (token, or two adjacent tokens) with its count in each column."""
    counts: dict[str, list[float]] = {}
    for index, tokens in enumerate(columns):
        found = Counter(tokens)
        found.update(f"{a} {b}" for a, b in pairwise(tokens))
        for term, count in found.items():
            counts.setdefault(term, [0.0] * len(columns))[index] = float(count)
    return counts


def _write_lengths(
    conn: PgConn,
    tenant: str,
    layer: Layer,
    rows: Sequence[Any],
    lengths: Sequence[int],
    shard: int,
) -> None:
    """Each row's indexed length, and the tenant's totals raised by the change (one statement)."""
    table = "turns" if layer is Layer.L0 else "memories"
    new_rows, delta = totals_change(rows, lengths)
    conn.execute(
        f"WITH written AS (UPDATE {table} r SET fts_len = u.len, fts_dirty = FALSE"
        "  FROM unnest(?::bigint[], ?::integer[]) AS u(rid, len) WHERE r.rid = u.rid)"
        + ADD_TO_TOTALS,
        ([int(row[0]) for row in rows], list(lengths), tenant, layer.value, shard, new_rows, delta),
    )


def totals_change(rows: Sequence[Any], lengths: Sequence[int]) -> tuple[int, int]:
    """The rows and tokens the totals gain when `rows` (their old lengths in `row[1]`, None
    for a row never indexed) are indexed with `lengths`."""
    new_rows = sum(1 for row in rows if row[1] is None)
    return new_rows, sum(lengths) - sum(int(row[1] or 0) for row in rows)


ADD_TO_TOTALS = (
    " INSERT INTO text_totals (tenant, layer, shard, rows, tokens) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (tenant, layer, shard) DO UPDATE SET"
    " rows = text_totals.rows + excluded.rows, tokens = text_totals.tokens + excluded.tokens"
)


def forget_rows(conn: PgConn, tenant: str, layer: Layer, lengths: Sequence[int | None]) -> None:
    """Take deleted rows (their indexed lengths) out of the tenant's totals (from shard 0:
    only the sum over the shards counts)."""
    indexed = [n for n in lengths if n is not None]
    if indexed:
        conn.execute(ADD_TO_TOTALS, (tenant, layer.value, 0, -len(indexed), -sum(indexed)))
