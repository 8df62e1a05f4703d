"""The core tables both databases hold (DDL written once: `store/migration.py`): L0 turns, L1
memories, `meta` and the fencing tokens. Each database adds its own full-text index (SQLite's
FTS5 tables and triggers, PostgreSQL's term tables) in its migrations 1-9.
"""

from __future__ import annotations

from stratamem.store.migration import Migration

TURNS = """
CREATE TABLE turns (
    rid {rid},
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT,
    text TEXT NOT NULL,
    ts {float} NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at {float} NOT NULL,
    scope_token TEXT NOT NULL,  -- sqlite only: the tenant's token, which FTS5 indexes
    embedding {bytes},
    emb_seq {bigint},
    fts_len INTEGER,  -- postgres only: the row's length in the text index
    fts_dirty BOOLEAN NOT NULL DEFAULT TRUE,  -- postgres only: not in the text index yet
    UNIQUE (tenant, id)
);
CREATE INDEX turns_by_session ON turns (tenant, session, seq);
CREATE INDEX turns_by_time ON turns (tenant, ts);
CREATE INDEX turns_emb_pending ON turns (rid) WHERE embedding IS NULL;
CREATE INDEX turns_emb_seq ON turns (tenant, emb_seq) WHERE emb_seq IS NOT NULL;
CREATE INDEX turns_fts_pending ON turns (tenant, rid) WHERE fts_dirty;  -- postgres only
"""

MEMORIES = """
CREATE TABLE memories (
    rid {rid},
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    priority INTEGER NOT NULL,
    source_turn_ids TEXT NOT NULL,
    session TEXT,
    activity_start {float},
    activity_end {float},
    valid_from {float} NOT NULL,
    valid_to {float},
    superseded_by TEXT,
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL,
    mode TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    fts_scope TEXT NOT NULL,
    embedding {bytes},
    emb_seq {bigint},
    fts_len INTEGER,  -- postgres only: the row's length in the text index
    fts_dirty BOOLEAN NOT NULL DEFAULT TRUE,  -- postgres only: not in the text index yet
    UNIQUE (tenant, id)
);
CREATE INDEX memories_current ON memories (tenant, valid_to, type);
CREATE INDEX memories_by_session ON memories (tenant, session);
CREATE INDEX memories_superseded_by ON memories (tenant, superseded_by);
CREATE INDEX memories_by_rid ON memories (tenant, rid);  -- postgres only
CREATE INDEX memories_emb_pending ON memories (rid) WHERE embedding IS NULL;
CREATE INDEX memories_emb_seq ON memories (tenant, emb_seq) WHERE emb_seq IS NOT NULL;
CREATE INDEX memories_fts_pending ON memories (tenant, rid) WHERE fts_dirty;  -- postgres only
"""

META = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE fences (key TEXT PRIMARY KEY, token {bigint} NOT NULL);
"""

PENDING_BY_TENANT = Migration(6, "pending embeddings by tenant, for a fair share", """
CREATE INDEX turns_emb_pending_by_tenant ON turns (tenant, rid) WHERE embedding IS NULL;
CREATE INDEX memories_emb_pending_by_tenant ON memories (tenant, rid) WHERE embedding IS NULL;
""")  # fmt: skip

#: The owner (lock grant) each fencing token was accepted from (`store/fencing.py`); rows from
#: before keep no owner and accept an equal token from anyone, as they did.
FENCE_OWNERS = Migration(8, "fencing tokens: the owner each was accepted from",
                         "ALTER TABLE fences ADD COLUMN owner TEXT;")  # fmt: skip
