"""Erasing a session's or a tenant's data from the PostgreSQL store, in the caller's transaction
(what goes: `store/erasure.py`): the text index's rows go with their records (`ON DELETE
CASCADE`) and the tenant's totals are lowered by what was deleted.
"""

from __future__ import annotations

from stratamem.domain import Layer
from stratamem.store import erasure
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.text_index import forget_rows

_DRAWN_FROM_SESSION = """
DELETE FROM memories m WHERE m.tenant = ? AND (
    m.session = ?
    OR EXISTS (
        SELECT 1 FROM jsonb_array_elements_text(m.source_turn_ids::jsonb) j(id)
        JOIN turns t ON t.tenant = m.tenant AND t.session = ? AND t.id = j.id
    )
) RETURNING m.fts_len
"""


def erase_session(conn: PgConn, tenant: str, session: str) -> dict[str, int]:
    memories = conn.execute(_DRAWN_FROM_SESSION, (tenant, session, session)).fetchall()
    turns = conn.execute(
        "DELETE FROM turns WHERE tenant = ? AND session = ? RETURNING fts_len", (tenant, session)
    ).fetchall()
    forget_rows(conn, tenant, Layer.L1, [r[0] for r in memories])
    forget_rows(conn, tenant, Layer.L0, [r[0] for r in turns])
    other = erasure.erase_session_rest(conn, tenant, session)
    return {"turns": len(turns), "memories": len(memories), "other": other}


def erase_tenant(conn: PgConn, tenant: str) -> dict[str, int]:
    counts = erasure.erase_tenant(conn, tenant)
    conn.execute("DELETE FROM text_totals WHERE tenant = ?", (tenant,))
    return counts
