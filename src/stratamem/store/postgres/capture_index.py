"""Indexing a capture's turns in the capture's own transaction (`text_index.py`'s terms).

The new turns are indexed whole. The turn before them was indexed when it was the session's
last: its `around` field (`text_index.around`) had no next turn, and now gains the first new
one's text. That only adds terms and raises counts, so its postings grow in place (the `around`
counts, its length, the totals) instead of being deleted and written again. A predecessor not
indexed that way (marked for indexing, or never indexed) is indexed whole.

The caller's transaction holds the session's lock, so no other writer touches these rows, and
runs in pipeline mode: only the read of the rows waits for the server.
"""

from __future__ import annotations

import zlib
from typing import Any

from stratamem.domain import Layer
from stratamem.store.core.tenant_words import tenant_words
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.text_index import (
    ADD_TO_TOTALS,
    TOTAL_SHARDS,
    TURN_FIELDS,
    around,
    array_literal,
    index_rows,
    terms,
    text_array,
)
from stratamem.store.postgres.tokens import Tokenizer

#: Where `around` is among a turn's fields (`text_index._fields`), 1-based as SQL arrays are.
_AROUND = 4
_FIELDS = 5
_SEQ, _DIRTY = 8, 9
_TAIL = (
    TURN_FIELDS.replace(", t.ts FROM", ", t.ts, t.seq, t.fts_dirty FROM")
    + " WHERE t.tenant = ? AND t.session = ? AND t.seq >= ? ORDER BY t.seq"
)
_GROW_TERMS = (
    "INSERT INTO turn_terms (tenant, term, rid, tf) SELECT ?, u.term, ?, u.tf::real[]"
    " FROM unnest(?::text[], ?::text[]) AS u(term, tf)"
    f" ON CONFLICT (tenant, term, rid) DO UPDATE SET tf[{_AROUND}] ="
    f" turn_terms.tf[{_AROUND}] + excluded.tf[{_AROUND}]"
)
_GROW_LENGTH = "WITH grown AS (UPDATE turns SET fts_len = fts_len + ? WHERE rid = ?)"


def index_captured(
    conn: PgConn, tokenizer: Tokenizer, tenant: str, session: str, first_seq: int
) -> None:
    """Index the session's turns from `first_seq` on (just written), and extend the one
    before them."""
    rows = conn.execute(_TAIL, (tenant, session, first_seq - 1)).fetchall()
    shard = zlib.crc32(session.encode()) % TOTAL_SHARDS
    whole = [row for row in rows if int(row[_SEQ]) >= first_seq]
    for row in rows:
        if int(row[_SEQ]) < first_seq and not _extended(conn, tokenizer, tenant, row, shard):
            whole.insert(0, row)
    index_rows(conn, tokenizer, tenant, Layer.L0, whole, shard)


def _extended(conn: PgConn, tokenizer: Tokenizer, tenant: str, row: Any, shard: int) -> bool:
    """Add the next turn's terms to the `around` field of a turn indexed without it; False
    (nothing written) when the turn was not indexed so."""
    if row[1] is None or row[_DIRTY]:
        return False
    earlier, after = row[5], row[6]
    before, now = tokenizer.tokens(
        [
            [tenant_words(tenant, around(earlier, None))],
            [tenant_words(tenant, around(earlier, after))],
        ]
    )
    grown = _grown(terms(before), terms(now))
    if grown is None:
        return False
    counts = text_array([_only_around(n) for n in grown.values()])
    conn.execute(_GROW_TERMS, (tenant, int(row[0]), text_array(list(grown)), counts))
    added = len(now[0]) - len(before[0])
    conn.execute(
        _GROW_LENGTH + ADD_TO_TOTALS,
        (added, int(row[0]), tenant, Layer.L0.value, shard, 0, added),
    )
    return True


def _grown(before: dict[str, list[float]], now: dict[str, list[float]]) -> dict[str, float] | None:
    """Each term's count gained; None when a term lost any (the field did not only grow)."""
    if any(term not in now or now[term][0] < counts[0] for term, counts in before.items()):
        return None
    return {term: counts[0] - before.get(term, [0.0])[0] for term, counts in now.items()
            if counts[0] != before.get(term, [0.0])[0]}  # fmt: skip


def _only_around(count: float) -> str:
    return array_literal([count if i + 1 == _AROUND else 0.0 for i in range(_FIELDS)])
