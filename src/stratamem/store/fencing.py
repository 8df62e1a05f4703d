"""Fencing tokens checked in the same transaction as the write they guard.

A `fences` row holds, per key, the newest token accepted and the owner (lock grant) it was
accepted from. A write is accepted when its token is greater (it takes the row over, owner
included), or equal and from the recorded owner; an equal token from another owner means the
backend granted one token twice (its counter went backwards, `PipelineBackend.raise_fence`)
and is refused, so two holders never both write under one token. A row recorded without an
owner (before migration 8, or by an ownerless fence) accepts an equal token from anyone, as
every row did before, until a greater token takes it over.
"""

from __future__ import annotations

from stratamem.errors import StaleFencingToken
from stratamem.store.core.port import Fence
from stratamem.store.sql import SqlConn

_CHECK_AND_RECORD = (
    "INSERT INTO fences (key, token, owner) VALUES (?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET token = excluded.token,"
    " owner = CASE WHEN fences.token < excluded.token THEN excluded.owner ELSE fences.owner END"
    " WHERE fences.token < excluded.token OR (fences.token = excluded.token"
    " AND (fences.owner IS NULL OR fences.owner = excluded.owner)) RETURNING token"
)


def check_and_record(conn: SqlConn, fence: Fence) -> None:
    """Refuse the surrounding write if a newer token was seen for the key, or the same token
    from another owner; else record this one.

    Must run inside the write transaction of the guarded write. One statement checks and
    records, and holds the key's row until the write commits, so two writers under the same key
    never both pass on a database that runs writes side by side.
    """
    recorded = conn.execute(_CHECK_AND_RECORD, (fence.key, fence.token, fence.owner)).fetchone()
    if recorded is None:
        token = newest(conn, fence.key)
        why = "granted since" if token > fence.token else "held by another owner"
        raise StaleFencingToken(
            f"write under fencing token {fence.token} for {fence.key!r} refused: "
            f"token {token} was {why}",
            newest=token,
        )


def newest(conn: SqlConn, key: str) -> int:
    row = conn.execute("SELECT token FROM fences WHERE key = ?", (key,)).fetchone()
    return int(row[0]) if row else 0
