"""The memory layers' tables both databases hold (DDL written once: `store/migration.py`):
session cursors and tenant marks, scene and profile versions, and what the backlog scheduler's
queries read (`store/backlog.py`). Memory versions need no table of their own: an update
inserts a new row and closes the old one (`valid_to`, `superseded_by`) in `memories`.

The backlog's triggers, which keep `session_heads` and `layer_tenants` up to date, are each
database's own (`store/sqlite/migrations.py`, `store/postgres/schema.py`).
"""

from __future__ import annotations

from stratamem.store.migration import Migration

LAYER_STATE = """
CREATE TABLE layer_sessions (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    l1_runs INTEGER NOT NULL DEFAULT 0,
    last_l1_at {float},
    last_l2_at {float},
    PRIMARY KEY (tenant, session)
);
CREATE TABLE layer_tenants (
    tenant TEXT PRIMARY KEY,
    l2_mark {bigint} NOT NULL DEFAULT 0,
    memories_since_l3 INTEGER NOT NULL DEFAULT 0,
    last_l2_at {float},
    last_l3_at {float}
);
"""

SCENES_PROFILE = """
CREATE TABLE scene_versions (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    body TEXT NOT NULL,
    heat {float} NOT NULL,
    memory_ids TEXT NOT NULL,
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL,
    deleted INTEGER NOT NULL,
    mode TEXT NOT NULL,
    current INTEGER NOT NULL,
    PRIMARY KEY (tenant, id, version)
);
CREATE INDEX scene_versions_current ON scene_versions (tenant, current);
CREATE TABLE profile_versions (
    tenant TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    updated_at {float} NOT NULL,
    mode TEXT NOT NULL,
    current INTEGER NOT NULL,
    PRIMARY KEY (tenant, version)
);
"""

#: Migration 13's tables (its triggers are each database's): per session, its newest turn and
#: a copy of the layers' cursor, whose partial index holds only the sessions owing L1, so a page
#: of them costs what it returns; flush requests accepted and not completed (one per session).
SESSION_HEADS = """
CREATE TABLE session_heads (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_turn_at {float} NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session)
);
CREATE INDEX session_heads_owed ON session_heads (tenant, session) WHERE last_seq > cursor_seq;
INSERT INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
SELECT t.tenant, t.session, MAX(t.seq), MAX(t.ts), COALESCE(MAX(s.cursor_seq), 0)
FROM turns t LEFT JOIN layer_sessions s ON s.tenant = t.tenant AND s.session = t.session
GROUP BY t.tenant, t.session;
"""

FLUSH_REQUESTS = """
CREATE TABLE layer_flush_requests (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    requested_at {float} NOT NULL,
    PRIMARY KEY (tenant, session)
);
"""

#: Migration 13's indexes to find tenants with memories past their L2 mark and scenes newer
#: than their last L3.
OWED_LAYERS_INDEXES = """
CREATE INDEX memories_by_tenant_rid ON memories (tenant, rid);
CREATE INDEX scene_versions_by_time ON scene_versions (tenant, created_at);
"""


def backlog_migration(triggers: str) -> Migration:
    """Migration 13: the tables and indexes above, and `triggers`, each database's own, that
    keep `session_heads` and `layer_tenants` up to date."""
    return Migration(13, "backlog: session heads, flush requests, tenants with memories",
                     SESSION_HEADS + FLUSH_REQUESTS + OWED_LAYERS_INDEXES + triggers)  # fmt: skip
