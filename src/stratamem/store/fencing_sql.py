"""Fencing tokens checked in the same transaction as the write they guard."""

from __future__ import annotations

from stratamem.errors import StaleFencingToken
from stratamem.store.base import Fence
from stratamem.store.sql import SqlConn


def check_and_record(conn: SqlConn, fence: Fence) -> None:
    """Refuse the surrounding write if a newer token was seen for the key; else record this one.

    Must run inside the write transaction of the guarded write. One statement checks and
    records, and holds the key's row until the write commits, so two writers under the same key
    never both pass on a database that runs writes side by side.
    """
    recorded = conn.execute(
        "INSERT INTO fences (key, token) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET token = excluded.token"
        " WHERE fences.token <= excluded.token RETURNING token",
        (fence.key, fence.token),
    ).fetchone()
    if recorded is None:
        token = newest(conn, fence.key)
        raise StaleFencingToken(
            f"write under fencing token {fence.token} for {fence.key!r} refused: "
            f"token {token} was granted since",
            newest=token,
        )


def newest(conn: SqlConn, key: str) -> int:
    row = conn.execute("SELECT token FROM fences WHERE key = ?", (key,)).fetchone()
    return int(row[0]) if row else 0
