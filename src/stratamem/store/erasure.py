"""What erasing a session's or a tenant's data removes, on both databases (each database's
`erase.py` adds its own: how a memory drawn from a session's turns is found, its text index's
totals, `secure_delete`).

A session's erase removes its turns, every memory drawn from them (even in part) or stated in
it, the layers' state and failure records of the session (failures keep raw LLM replies), and
its context-offload records. A tenant's erase removes every row the tenant has in every table,
except its API keys and registration, which the service's tenant admin manages.

This is the store's own erase, without the layers: the service forgets a session, a turn or a
memory through `store/lineage/store.py`, which also purges and rebuilds the scene and profile
versions built from what went, and calls `erase_session_rest` for the sessions' other records.
A new table of tenant data must be named here.
"""

from __future__ import annotations

from stratamem.store.sql import SqlConn

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
    "lineage",
    "lineage_stale",
    *SESSION_TABLES,
)

#: Bookkeeping keyed by (tenant, session) that holds no content: erased, not counted.
BOOKKEEPING_TABLES = ("session_heads", "layer_flush_requests", "executions", "turn_outcomes")


def erase_session_rest(conn: SqlConn, tenant: str, session: str) -> int:
    """Delete the session's rows of every table but turns and memories (which the caller
    deletes); how many rows of content went (bookkeeping not counted)."""
    other = sum(
        conn.execute(f"DELETE FROM {table} WHERE tenant = ? AND session = ?", (tenant, session))
        .rowcount
        for table in SESSION_TABLES
    )
    for table in BOOKKEEPING_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE tenant = ? AND session = ?", (tenant, session))
    return other


def tenant_sessions(conn: SqlConn, tenant: str) -> list[str]:
    """Every session name the tenant has a row of, in any table keyed by (tenant, session):
    what a tenant's erase must also clear outside the store (the pipeline's session timers)."""
    union = " UNION ".join(
        f"SELECT session FROM {table} WHERE tenant = ?"
        for table in ("turns", *SESSION_TABLES, *BOOKKEEPING_TABLES)
    )
    count = 1 + len(SESSION_TABLES) + len(BOOKKEEPING_TABLES)
    rows = conn.execute(f"SELECT session FROM ({union}) AS s ORDER BY session", (tenant,) * count)
    return [row[0] for row in rows.fetchall()]


def erase_tenant(conn: SqlConn, tenant: str) -> dict[str, int]:
    """Delete every row of `tenant` in `TENANT_TABLES` and its bookkeeping, in the caller's
    transaction; counts of deleted rows by kind (`turns`, `memories`, `other`)."""
    counts = {
        table: conn.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,)).rowcount
        for table in TENANT_TABLES
    }
    for table in BOOKKEEPING_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
    other = sum(n for table, n in counts.items() if table not in ("turns", "memories"))
    return {"turns": counts["turns"], "memories": counts["memories"], "other": other}
