"""Erasing a session's or a tenant's data from the SQLite store, in one transaction.

A session's erase removes its turns, every memory drawn from them (even in part) or stated in
it, the layers' state and failure records of the session (failures keep raw LLM replies), and
its context-offload records. A tenant's erase removes every row the tenant has in every table,
except its API keys and registration, which the service's tenant admin manages.

Scenes (L2) and the profile (L3) summarise many sessions: a session's erase does not rewrite
them (erase the tenant to remove them). Deleted rows are gone from every read at once; their
bytes are overwritten on disk (`secure_delete`), but the full-text indexes keep unreadable
fragments until their segments merge.
"""

from __future__ import annotations

import sqlite3

#: Tables keyed by (tenant, session), besides turns and memories.
SESSION_TABLES = (
    "layer_sessions",
    "failures",
    "offload_pairs",
    "offload_entries",
    "offload_refs",
    "offload_marks",
    "offload_boundaries",
    "offload_tasks",
)
#: Every table holding a tenant's data (`api_keys` and `tenants` are the service's).
TENANT_TABLES = (
    "turns",
    "memories",
    "layer_tenants",
    "layer_receipts",
    "scene_versions",
    "profile_versions",
    *SESSION_TABLES,
)

#: Bookkeeping keyed by (tenant, session) that holds no content: erased, not counted.
BOOKKEEPING_TABLES = ("session_heads", "layer_flush_requests", "executions")

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
    """Delete the session's data (see the module doc); counts of deleted rows by kind."""
    params = {"tenant": tenant, "session": session}
    memories = conn.execute(_DRAWN_FROM_SESSION, params).rowcount
    turns = conn.execute(
        "DELETE FROM turns WHERE tenant = :tenant AND session = :session", params
    ).rowcount
    other = sum(
        conn.execute(
            f"DELETE FROM {table} WHERE tenant = :tenant AND session = :session", params
        ).rowcount
        for table in SESSION_TABLES
    )
    for table in BOOKKEEPING_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE tenant = :tenant AND session = :session", params)
    return {"turns": turns, "memories": memories, "other": other}


def erase_tenant(conn: sqlite3.Connection, tenant: str) -> dict[str, int]:
    """Delete every row of `tenant` in `TENANT_TABLES`; counts of deleted rows by kind."""
    counts = {
        table: conn.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,)).rowcount
        for table in TENANT_TABLES
    }
    for table in BOOKKEEPING_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
    other = sum(n for table, n in counts.items() if table not in ("turns", "memories"))
    return {"turns": counts["turns"], "memories": counts["memories"], "other": other}
