"""Indexing a capture's turns in the capture's own transaction (`text_index.py`'s terms).

The new turns are indexed whole. The turn before them was indexed when it was the session's
last: its `around` field (`text_index.around`) had no next turn, and now gains the first new
one's text. That only adds terms and raises counts, so its postings grow in place (the `around`
counts, its length, the totals) instead of being deleted and written again. A predecessor not
indexed that way (marked for indexing, or never indexed) is indexed whole.

The caller's transaction holds the session's lock, so no other writer touches these rows, and
runs in pipeline mode: only the read of the rows waits for the server. What a capture costs
is what it sends: one read of the session's last turns (a range of its index, each turn's
neighbours found here rather than by joins), one call of the tokenizer for every document, and
the postings, lengths and totals in one statement. The store inserts captured turns already
unmarked (`fts_dirty` false: they are indexed before the transaction ends), so setting their
lengths changes no indexed column and rewrites no index entry.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from stratamem.domain import Layer, Turn
from stratamem.store.core.tenant_words import tenant_words
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.text_index import (
    ADD_TO_TOTALS,
    TOTAL_SHARDS,
    around,
    array_literal,
    fields,
    postings,
    row_length,
    terms,
    text_array,
    totals_change,
)
from stratamem.store.postgres.tokens import Tokenizer

#: Where `around` is among a turn's fields (`text_index.fields`), 1-based as SQL arrays are.
_AROUND = 4
_FIELDS = 5
#: How far back a turn's fields reach: its context is the turn before it, its `around` the one
#: before that (and the next): the turn before the new ones needs the two before it.
_REACH = 3
_COLUMNS = "SELECT rid, fts_len, text, speaker, ts, seq, fts_dirty, id FROM turns"
_TAIL = _COLUMNS + " WHERE tenant = ? AND session = ? AND seq >= ? ORDER BY seq"
#: The session's last turns, before the new ones are written.
_LAST = _COLUMNS + " WHERE tenant = ? AND session = ? ORDER BY seq DESC LIMIT ?"
#: The rows are numbered from 1 in the first array (their rids: a new turn's is read back with
#: its sequence number); postings and lengths refer to them by that number. They were named by
#: their ids, joined to the turns: planned on tables never analysed (a new database, a tenant's
#: first turns) the join read every turn of the tenant at each capture (301 for 2 ids, issue 32).
_WRITE = (
    "WITH ids AS MATERIALIZED (SELECT w.rid, w.pos FROM unnest(?::bigint[]) WITH ORDINALITY"
    " AS w(rid, pos)),"
    " posted AS (INSERT INTO turn_terms (tenant, term, rid, tf)"
    " SELECT ?, u.term, ids.rid, u.tf::real[] FROM unnest(?::text[], ?::bigint[], ?::text[])"
    " AS u(term, pos, tf) JOIN ids ON ids.pos = u.pos"
    f" ON CONFLICT (tenant, term, rid) DO UPDATE SET tf[{_AROUND}] ="
    f" turn_terms.tf[{_AROUND}] + excluded.tf[{_AROUND}]),"
    " written AS (UPDATE turns r SET fts_len = u.len, fts_dirty = FALSE"
    " FROM unnest(?::bigint[], ?::integer[]) AS u(pos, len) JOIN ids ON ids.pos = u.pos"
    " WHERE r.rid = ids.rid)" + ADD_TO_TOTALS
)


class CaptureConn(PgConn):
    """A capture's connection: each of its sessions' last turns asked for at once, before the
    new turns are written, so the answers come with the first insert's (pipeline mode)."""

    def __init__(self, raw: psycopg.Connection[Any], tenant: str, sessions: Sequence[str]) -> None:
        super().__init__(raw)
        self.tails = {s: self.execute(_LAST, (tenant, s, _REACH)) for s in sorted(set(sessions))}


@dataclass(frozen=True)
class Extension:
    """A turn's `around` field grown by the next turn: its rid, its length before and after,
    each term's count gained."""

    rid: int
    old_length: int
    length: int
    gained: dict[str, float]


#: Positions in a row of `_fielded`: TURN_FIELDS' columns, then the seq, the mark (then the id).
_SEQ, _DIRTY = 8, 9


def index_captured(
    conn: PgConn, tokenizer: Tokenizer, tenant: str, session: str, first_seq: int,
    stored: Sequence[Turn], rids: Mapping[str, int],
) -> None:  # fmt: skip
    """Index the session's turns from `first_seq` on (`stored`, just written, their row ids by
    turn id in `rids`), and extend the one before them."""
    known = _known(conn, session, stored, rids)
    if known is None:  # not simply after the last ones (an import): read as they are now
        known = conn.execute(_TAIL, (tenant, session, first_seq - _REACH)).fetchall()
    rows = _fielded(known, first_seq - 1)
    whole = [row for row in rows if int(row[_SEQ]) >= first_seq]
    before = [row for row in rows if int(row[_SEQ]) < first_seq]
    docs = [fields(tenant, Layer.L0, row) for row in whole]
    extending = bool(before) and _indexed(before[0])
    if extending:
        docs += _around_docs(tenant, before[0])
    tokens = tokenizer.tokens(docs)
    extension = None
    if extending:
        extension = _extension(before[0], tokens[-2][0], tokens[-1][0])
        tokens = tokens[: len(whole)]
    if before and extension is None:  # indexed whole, as every new turn
        whole.insert(0, before[0])
        tokens[:0] = tokenizer.tokens([fields(tenant, Layer.L0, before[0])])
    _write(conn, tenant, zlib.crc32(session.encode()) % TOTAL_SHARDS, whole, tokens, extension)


def _known(
    conn: PgConn, session: str, stored: Sequence[Turn], rids: Mapping[str, int]
) -> Sequence[Any] | None:
    """The session's last turns read before the insert and the stored ones, in `_TAIL`'s
    columns, when the stored ones follow the last ones (None otherwise, or unread)."""
    if not isinstance(conn, CaptureConn) or session not in conn.tails:
        return None
    last = conn.tails[session].fetchall()[::-1]
    top = int(last[-1][5]) if last else 0
    new = sorted(stored, key=lambda t: t.seq)
    if [t.seq for t in new] != list(range(top + 1, top + 1 + len(new))):
        return None
    return [*last, *((rids[t.id], None, t.text, t.speaker, t.timestamp, t.seq, False, t.id)
                     for t in new)]  # fmt: skip


def _fielded(rows: Sequence[Any], first_seq: int) -> list[tuple[Any, ...]]:
    """The rows from `first_seq` on, each as `text_index.TURN_FIELDS` reads it (its
    neighbours' texts found by sequence number, None where there is none), then its seq, its
    mark and its id."""
    texts = {int(row[5]): row[2] for row in rows}
    return [
        (row[0], row[1], row[2], row[3], texts.get(seq - 1), texts.get(seq - 2),
         texts.get(seq + 1), row[4], seq, row[6], row[7])
        for row in rows if (seq := int(row[5])) >= first_seq
    ]  # fmt: skip


def _indexed(row: Any) -> bool:
    """Whether the turn is in the index as it is (not marked, indexed before)."""
    return row[1] is not None and not row[_DIRTY]


def _around_docs(tenant: str, row: Any) -> list[list[str | None]]:
    """The turn's `around` field as it was indexed (no next turn) and as it is now."""
    earlier, after = row[5], row[6]
    return [
        [tenant_words(tenant, around(earlier, None))],
        [tenant_words(tenant, around(earlier, after))],
    ]


def _extension(row: Any, before: list[str], now: list[str]) -> Extension | None:
    """How the row's `around` field grew from the tokens `before` to `now`: each term's count
    gained; None when a term lost any (the field did not only grow)."""
    old, new = terms([before]), terms([now])
    if any(term not in new or new[term][0] < counts[0] for term, counts in old.items()):
        return None
    gained = {term: counts[0] - old.get(term, [0.0])[0] for term, counts in new.items()
              if counts[0] != old.get(term, [0.0])[0]}  # fmt: skip
    old_length = int(row[1])
    return Extension(int(row[0]), old_length, old_length + len(now) - len(before), gained)


def _write(
    conn: PgConn,
    tenant: str,
    shard: int,
    whole: Sequence[Any],
    tokens: Sequence[Sequence[Sequence[str]]],
    extension: Extension | None,
) -> None:
    """One statement: the postings of the rows indexed whole and the grown `around` counts of
    the extended row, every row's length, and the totals' change (after deleting the old
    postings of a row indexed whole again)."""
    rids = [int(row[0]) for row in whole]
    again = [int(row[0]) for row in whole if row[1] is not None]
    if again:
        conn.execute("DELETE FROM turn_terms WHERE rid = ANY(?)", (again,))
    names, positions, counts = postings(range(1, len(whole) + 1), tokens)
    lengths = [row_length(Layer.L0, columns) for columns in tokens]
    new_rows, delta = totals_change(whole, lengths)
    if extension is not None:
        rids.append(extension.rid)
        lengths.append(extension.length)
        delta += extension.length - extension.old_length
        gained = extension.gained
        names = _joined(names, text_array(list(gained)))
        positions = _joined(positions, "{" + ",".join([str(len(rids))] * len(gained)) + "}")
        counts = _joined(counts, text_array([_only_around(n) for n in gained.values()]))
    conn.execute(
        _WRITE,
        (rids, tenant, names, positions, counts,
         "{" + ",".join(str(i + 1) for i in range(len(lengths))) + "}", lengths,
         tenant, Layer.L0.value, shard, new_rows, delta),
    )  # fmt: skip


def _joined(first: str, second: str) -> str:
    """Two array literals as one."""
    if first == "{}":
        return second
    if second == "{}":
        return first
    return first[:-1] + "," + second[1:]


def _only_around(count: float) -> str:
    return array_literal([count if i + 1 == _AROUND else 0.0 for i in range(_FIELDS)])
