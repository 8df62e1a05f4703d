"""Erasing a session's data from the SQLite store, in the caller's transaction (what goes:
`store/erasure.py`). Deleted rows are gone from every read at once; their bytes are
overwritten on disk (`secure_delete`, set by the store), but the full-text indexes keep
unreadable fragments until their segments merge.
"""

from __future__ import annotations

import sqlite3

from stratamem.store.erasure import erase_session_rest

_DRAWN_FROM_SESSION = """
DELETE FROM memories WHERE tenant = :tenant AND (
    session = :session
    OR EXISTS (
        SELECT 1 FROM json_each(memories.source_turn_ids) j
        JOIN turns t ON t.tenant = :tenant AND t.session = :session AND t.id = j.value
    )
)
"""


def erase_session(conn: sqlite3.Connection, tenant: str, session: str) -> dict[str, int]:
    """Delete the session's data; counts of deleted rows by kind."""
    params = {"tenant": tenant, "session": session}
    memories = conn.execute(_DRAWN_FROM_SESSION, params).rowcount
    turns = conn.execute(
        "DELETE FROM turns WHERE tenant = :tenant AND session = :session", params
    ).rowcount
    other = erase_session_rest(conn, tenant, session)
    return {"turns": turns, "memories": memories, "other": other}
