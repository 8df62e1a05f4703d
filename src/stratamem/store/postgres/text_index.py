"""The PostgreSQL text index: each row's terms with their count per field, and per-tenant totals.

A term is one token (`tokens.py`) or two adjacent tokens of the same field ("grand open"), so
a query's phrases of two words are looked up like words. Words are prefixed with the tenant's
code as in the SQLite index (`store/sqlite/tenant_words.py`), and terms, document frequencies,
row counts and lengths are all the tenant's own: one tenant's writes never move another's scores.

Fields of a turn: its text, speaker, the previous turn (`context`), the turn before that and the
next one (`around`), its date in words (`dated`), as `store/sqlite/turn_context.py`. A memory has
one field, its content. A row's length counts every field plus its scope tokens (one for a
turn, two for a memory), as the SQLite index counts its scope column.

Rows are indexed after they are written: a write marks them (`fts_dirty`), and `catch_up` indexes
a tenant's marked rows (after each capture, and before each search), so any writer of the
tables (the shared layer records included) keeps the index right.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from stratamem.domain import Layer
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.tokens import Tokenizer
from stratamem.store.sqlite.tenant_words import tenant_words

TERM_TABLES = {Layer.L0: "turn_terms", Layer.L1: "memory_terms"}
SCOPE_TOKENS = {Layer.L0: 1, Layer.L1: 2}
BATCH_ROWS = 500
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_TURN_FIELDS = (
    "SELECT t.rid, t.fts_len, t.text, t.speaker, p1.text, p2.text, n1.text, t.ts FROM turns t"
    " LEFT JOIN turns p1 ON p1.tenant = t.tenant AND p1.session = t.session AND p1.seq = t.seq - 1"
    " LEFT JOIN turns p2 ON p2.tenant = t.tenant AND p2.session = t.session AND p2.seq = t.seq - 2"
    " LEFT JOIN turns n1 ON n1.tenant = t.tenant AND n1.session = t.session AND n1.seq = t.seq + 1"
    " WHERE t.tenant = ? AND t.fts_dirty ORDER BY t.rid LIMIT ?"
)
_MEMORY_FIELDS = (
    "SELECT rid, fts_len, content FROM memories WHERE tenant = ? AND fts_dirty ORDER BY rid LIMIT ?"
)


def date_words(ts: float) -> str | None:
    """'8 May 2023' (UTC), as the SQLite index's `dated` field (None for a time no calendar
    date stands for, as SQLite's `strftime` gives NULL)."""
    try:
        day = dt.datetime.fromtimestamp(ts, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def has_dirty(conn: PgConn, tenant: str, layer: Layer) -> bool:
    table = "turns" if layer is Layer.L0 else "memories"
    row = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM {table} WHERE tenant = ? AND fts_dirty)", (tenant,)
    ).fetchone()
    return bool(row[0])


def index_batch(conn: PgConn, tokenizer: Tokenizer, tenant: str, layer: Layer) -> int:
    """Index up to `BATCH_ROWS` marked rows of the tenant (inside the caller's transaction,
    which holds the tenant's index lock); returns how many."""
    sql = _TURN_FIELDS if layer is Layer.L0 else _MEMORY_FIELDS
    rows = conn.execute(sql, (tenant, BATCH_ROWS)).fetchall()
    if not rows:
        return 0
    docs = [_fields(tenant, layer, row) for row in rows]
    tokens = tokenizer.tokens(docs)
    table = TERM_TABLES[layer]
    rids = [int(row[0]) for row in rows]
    conn.execute(f"DELETE FROM {table} WHERE rid = ANY(?)", (rids,))
    postings = [
        (tenant, term, rid, counts)
        for rid, columns in zip(rids, tokens, strict=True)
        for term, counts in _terms(columns).items()
    ]
    conn.executemany(f"INSERT INTO {table} (tenant, term, rid, tf) VALUES (?, ?, ?, ?)", postings)
    lengths = [sum(len(c) for c in columns) + SCOPE_TOKENS[layer] for columns in tokens]
    _write_lengths(conn, tenant, layer, rows, lengths)
    return len(rows)


def _fields(tenant: str, layer: Layer, row: Any) -> list[str | None]:
    if layer is Layer.L1:
        return [tenant_words(tenant, row[2])]
    text, speaker, before, earlier, after, ts = row[2:8]
    around = f"{earlier or ''} {after or ''}".strip()
    return [
        tenant_words(tenant, text),
        tenant_words(tenant, speaker),
        tenant_words(tenant, before or ""),
        tenant_words(tenant, around),
        tenant_words(tenant, date_words(float(ts))),
    ]


def _terms(columns: Sequence[Sequence[str]]) -> dict[str, list[float]]:
    """Each term (token, or two adjacent tokens) with its count in each column."""
    counts: dict[str, list[float]] = {}
    for index, tokens in enumerate(columns):
        found = Counter(tokens)
        found.update(f"{a} {b}" for a, b in pairwise(tokens))
        for term, count in found.items():
            counts.setdefault(term, [0.0] * len(columns))[index] = float(count)
    return counts


def _write_lengths(
    conn: PgConn, tenant: str, layer: Layer, rows: Sequence[Any], lengths: Sequence[int]
) -> None:
    table = "turns" if layer is Layer.L0 else "memories"
    conn.executemany(
        f"UPDATE {table} SET fts_len = ?, fts_dirty = FALSE WHERE rid = ?",
        [(length, int(row[0])) for row, length in zip(rows, lengths, strict=True)],
    )
    new_rows = sum(1 for row in rows if row[1] is None)
    delta = sum(lengths) - sum(int(row[1] or 0) for row in rows)
    conn.execute(
        "INSERT INTO text_totals (tenant, layer, rows, tokens) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (tenant, layer) DO UPDATE SET rows = text_totals.rows + excluded.rows,"
        " tokens = text_totals.tokens + excluded.tokens",
        (tenant, layer.value, new_rows, delta),
    )


def forget_rows(conn: PgConn, tenant: str, layer: Layer, lengths: Sequence[int | None]) -> None:
    """Take deleted rows (their indexed lengths) out of the tenant's totals."""
    indexed = [n for n in lengths if n is not None]
    if indexed:
        conn.execute(
            "UPDATE text_totals SET rows = rows - ?, tokens = tokens - ?"
            " WHERE tenant = ? AND layer = ?",
            (len(indexed), sum(indexed), tenant, layer.value),
        )
