"""The PostgreSQL schema, as numbered migrations mirroring the SQLite store's parts: 1-9 core
(turns, memories, their text index), 10-19 memory layers, 20-29 context offload, 30-39 service.

Columns keep the SQLite store's names and meanings (so the shared record modules run unchanged):
times are epoch seconds (`DOUBLE PRECISION`), flags are integers, JSON is text. A record's
vectors are one float32 blob (`store/core/pieces.py`), searched per tenant
(`postgres/vector_search.py`).
The text index is a table of terms per row (`text_index.py`), with per-tenant totals.
"""

from __future__ import annotations

from stratamem.store.migration import Migration

M001_CORE = """
CREATE TABLE turns (
    rid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT,
    text TEXT NOT NULL,
    ts DOUBLE PRECISION NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at DOUBLE PRECISION NOT NULL,
    embedding BYTEA,
    emb_seq BIGINT,
    fts_len INTEGER,
    fts_dirty BOOLEAN NOT NULL DEFAULT TRUE,
    UNIQUE (tenant, id)
);
CREATE INDEX turns_by_session ON turns (tenant, session, seq);
CREATE INDEX turns_by_time ON turns (tenant, ts);
CREATE INDEX turns_emb_pending ON turns (rid) WHERE embedding IS NULL;
CREATE INDEX turns_emb_seq ON turns (tenant, emb_seq) WHERE emb_seq IS NOT NULL;
CREATE INDEX turns_fts_pending ON turns (tenant, rid) WHERE fts_dirty;
CREATE TABLE memories (
    rid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    priority INTEGER NOT NULL,
    source_turn_ids TEXT NOT NULL,
    session TEXT,
    activity_start DOUBLE PRECISION,
    activity_end DOUBLE PRECISION,
    valid_from DOUBLE PRECISION NOT NULL,
    valid_to DOUBLE PRECISION,
    superseded_by TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    mode TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    fts_scope TEXT NOT NULL,
    embedding BYTEA,
    emb_seq BIGINT,
    fts_len INTEGER,
    fts_dirty BOOLEAN NOT NULL DEFAULT TRUE,
    UNIQUE (tenant, id)
);
CREATE INDEX memories_current ON memories (tenant, valid_to, type);
CREATE INDEX memories_by_session ON memories (tenant, session);
CREATE INDEX memories_superseded_by ON memories (tenant, superseded_by);
CREATE INDEX memories_by_rid ON memories (tenant, rid);
CREATE INDEX memories_emb_pending ON memories (rid) WHERE embedding IS NULL;
CREATE INDEX memories_emb_seq ON memories (tenant, emb_seq) WHERE emb_seq IS NOT NULL;
CREATE INDEX memories_fts_pending ON memories (tenant, rid) WHERE fts_dirty;
CREATE TABLE turn_terms (
    tenant TEXT NOT NULL,
    term TEXT NOT NULL,
    rid BIGINT NOT NULL REFERENCES turns (rid) ON DELETE CASCADE,
    tf REAL[] NOT NULL,
    PRIMARY KEY (tenant, term, rid)
);
CREATE INDEX turn_terms_by_rid ON turn_terms (rid);
CREATE TABLE memory_terms (
    tenant TEXT NOT NULL,
    term TEXT NOT NULL,
    rid BIGINT NOT NULL REFERENCES memories (rid) ON DELETE CASCADE,
    tf REAL[] NOT NULL,
    PRIMARY KEY (tenant, term, rid)
);
CREATE INDEX memory_terms_by_rid ON memory_terms (rid);
CREATE TABLE text_totals (
    tenant TEXT NOT NULL,
    layer TEXT NOT NULL,
    rows BIGINT NOT NULL DEFAULT 0,
    tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, layer)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE fences (key TEXT PRIMARY KEY, token BIGINT NOT NULL);
CREATE SEQUENCE emb_seq;
"""

# A tenant's text totals in shards (`text_index.TOTAL_SHARDS`), so that captures of different
# sessions, each indexing its turns in its own transaction, do not queue for one row.
M009_TOTAL_SHARDS = """
ALTER TABLE text_totals ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE text_totals DROP CONSTRAINT text_totals_pkey;
ALTER TABLE text_totals ADD PRIMARY KEY (tenant, layer, shard);
"""

M010_LAYERS = """
CREATE TABLE layer_sessions (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    l1_runs INTEGER NOT NULL DEFAULT 0,
    last_l1_at DOUBLE PRECISION,
    last_l2_at DOUBLE PRECISION,
    PRIMARY KEY (tenant, session)
);
CREATE TABLE layer_tenants (
    tenant TEXT PRIMARY KEY,
    l2_mark BIGINT NOT NULL DEFAULT 0,
    memories_since_l3 INTEGER NOT NULL DEFAULT 0,
    last_l2_at DOUBLE PRECISION,
    last_l3_at DOUBLE PRECISION
);
CREATE TABLE layer_receipts (
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    completed_at DOUBLE PRECISION NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (tenant, task_id)
);
CREATE TABLE scene_versions (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    body TEXT NOT NULL,
    heat DOUBLE PRECISION NOT NULL,
    memory_ids TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
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
    updated_at DOUBLE PRECISION NOT NULL,
    mode TEXT NOT NULL,
    current INTEGER NOT NULL,
    PRIMARY KEY (tenant, version)
);
CREATE TABLE failures (
    rid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    stage TEXT NOT NULL,
    session TEXT,
    task_id TEXT NOT NULL,
    error TEXT NOT NULL,
    raws TEXT NOT NULL,
    turn_ids TEXT NOT NULL DEFAULT '[]',
    detail TEXT NOT NULL DEFAULT '{}',
    attempts INTEGER NOT NULL DEFAULT 1,
    failed_at DOUBLE PRECISION NOT NULL,
    resolved_at DOUBLE PRECISION,
    UNIQUE (tenant, id)
);
CREATE INDEX failures_by_tenant ON failures (tenant, rid);
CREATE INDEX failures_open ON failures (tenant, stage, status, session);
"""

M020_OFFLOAD = """
CREATE TABLE offload_pairs (
    rid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    params TEXT NOT NULL,
    result TEXT,
    error TEXT,
    ts DOUBLE PRECISION NOT NULL,
    duration_ms DOUBLE PRECISION,
    received_at DOUBLE PRECISION NOT NULL,
    claim_id TEXT,
    claim_expires DOUBLE PRECISION,
    done INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, session, call_id)
);
CREATE INDEX offload_pairs_pending ON offload_pairs (tenant, session, done, rid);
CREATE TABLE offload_entries (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,
    score INTEGER NOT NULL,
    ref_id TEXT NOT NULL,
    ts DOUBLE PRECISION NOT NULL,
    result_chars INTEGER NOT NULL,
    mode TEXT NOT NULL,
    task_id TEXT,
    node_id TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, session, call_id)
);
CREATE INDEX offload_entries_by_task ON offload_entries (tenant, session, task_id, node_id);
CREATE INDEX offload_entries_by_time ON offload_entries (tenant, session, ts);
CREATE TABLE offload_refs (
    tenant TEXT NOT NULL,
    ref_id TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, ref_id)
);
CREATE TABLE offload_marks (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    mark_id TEXT NOT NULL,
    ts DOUBLE PRECISION NOT NULL,
    text TEXT NOT NULL,
    task_id TEXT,
    judged INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session, mark_id)
);
CREATE INDEX offload_marks_by_time ON offload_marks (tenant, session, ts);
CREATE TABLE offload_boundaries (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    version INTEGER NOT NULL,
    active_task TEXT,
    last_mark_ts DOUBLE PRECISION,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, session)
);
CREATE TABLE offload_tasks (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    task_id TEXT NOT NULL,
    label TEXT NOT NULL,
    status TEXT NOT NULL,
    long_task INTEGER NOT NULL DEFAULT 0,
    mermaid TEXT NOT NULL DEFAULT '',
    version INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, session, task_id)
);
"""

M030_TENANTS = """
CREATE TABLE tenants (
    name TEXT PRIMARY KEY,
    label TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE api_keys (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    secret_sha256 TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);
"""

M006_PENDING_BY_TENANT = """
CREATE INDEX turns_emb_pending_by_tenant ON turns (tenant, rid) WHERE embedding IS NULL;
CREATE INDEX memories_emb_pending_by_tenant ON memories (tenant, rid) WHERE embedding IS NULL;
"""

# pgvector (`vector_index.py`): each vector of a record (a turn has one per sentence) as a row,
# decoded from the record's blob by its `emb_seq` (`seq`: a row whose record has a newer one is
# stale and never matched). Dimensionless: the model (and so the dimension) is bound per store;
# a tenant's HNSW index casts to it. `vector_indexes` lists the tenants' built indexes.
M007_VECTORS = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE turn_vectors (
    rid BIGINT NOT NULL REFERENCES turns (rid) ON DELETE CASCADE,
    piece SMALLINT NOT NULL,
    tenant TEXT NOT NULL,
    seq BIGINT NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (rid, piece)
);
CREATE INDEX turn_vectors_by_tenant ON turn_vectors (tenant);
CREATE TABLE memory_vectors (
    rid BIGINT NOT NULL REFERENCES memories (rid) ON DELETE CASCADE,
    piece SMALLINT NOT NULL,
    tenant TEXT NOT NULL,
    seq BIGINT NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (rid, piece)
);
CREATE INDEX memory_vectors_by_tenant ON memory_vectors (tenant);
CREATE TABLE vector_marks (
    tenant TEXT NOT NULL,
    layer TEXT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (tenant, layer)
);
CREATE TABLE vector_indexes (
    tenant TEXT NOT NULL,
    layer TEXT NOT NULL,
    dim INTEGER NOT NULL,
    name TEXT NOT NULL,
    pieces_per_record DOUBLE PRECISION NOT NULL,
    built_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, layer)
);
"""

M015_RECEIPTS = """
ALTER TABLE layer_receipts ADD COLUMN outcome TEXT NOT NULL DEFAULT 'completed';
ALTER TABLE layer_receipts ADD COLUMN attempt TEXT;
ALTER TABLE layer_receipts ADD COLUMN key_id TEXT;
ALTER TABLE layer_receipts ADD COLUMN mac TEXT;
CREATE TABLE receipt_keys (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    id TEXT PRIMARY KEY,
    secret BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    retired_at DOUBLE PRECISION
);
"""

# The execution log of pipeline tasks (as SQLite's migration 17, `sqlite/layer_schema.py`).
M017_EXECUTIONS = """
CREATE TABLE executions (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    delivery INTEGER NOT NULL,
    token BIGINT,
    worker TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    type TEXT NOT NULL,
    session TEXT,
    lock_key TEXT,
    committed_at DOUBLE PRECISION,
    ended_at DOUBLE PRECISION,
    outcome TEXT,
    fenced_at DOUBLE PRECISION
);
CREATE INDEX executions_by_task ON executions (tenant, task_id);
CREATE INDEX executions_open ON executions (tenant, lock_key)
    WHERE ended_at IS NULL AND fenced_at IS NULL;
"""

# Retention's indexes (as SQLite's migration 18, `sqlite/layer_schema.py`).
M018_LOG_RETENTION = """
CREATE INDEX executions_ended ON executions (ended_at, rowid) WHERE ended_at IS NOT NULL;
CREATE INDEX layer_receipts_completed ON layer_receipts (completed_at, tenant, task_id);
"""

# The backlog scheduler's tables (as SQLite's migration 13, `sqlite/backlog_schema.py`).
M013_BACKLOG = """
CREATE TABLE session_heads (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_turn_at DOUBLE PRECISION NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session)
);
CREATE INDEX session_heads_owed ON session_heads (tenant, session) WHERE last_seq > cursor_seq;
INSERT INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
SELECT t.tenant, t.session, MAX(t.seq), MAX(t.ts), COALESCE(MAX(s.cursor_seq), 0)
FROM turns t LEFT JOIN layer_sessions s ON s.tenant = t.tenant AND s.session = t.session
GROUP BY t.tenant, t.session;
CREATE FUNCTION session_heads_turn() RETURNS trigger AS $$
BEGIN
    INSERT INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
    VALUES (NEW.tenant, NEW.session, NEW.seq, NEW.ts, COALESCE((SELECT cursor_seq FROM
        layer_sessions WHERE tenant = NEW.tenant AND session = NEW.session), 0))
    ON CONFLICT (tenant, session) DO UPDATE
    SET last_seq = GREATEST(session_heads.last_seq, EXCLUDED.last_seq),
        last_turn_at = GREATEST(session_heads.last_turn_at, EXCLUDED.last_turn_at);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER session_heads_turn AFTER INSERT ON turns
    FOR EACH ROW EXECUTE FUNCTION session_heads_turn();
CREATE FUNCTION session_heads_cursor() RETURNS trigger AS $$
BEGIN
    UPDATE session_heads SET cursor_seq = NEW.cursor_seq
    WHERE tenant = NEW.tenant AND session = NEW.session;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER session_heads_cursor AFTER INSERT OR UPDATE OF cursor_seq ON layer_sessions
    FOR EACH ROW EXECUTE FUNCTION session_heads_cursor();
CREATE TABLE layer_flush_requests (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    requested_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, session)
);
INSERT INTO layer_tenants (tenant) SELECT DISTINCT tenant FROM memories ON CONFLICT DO NOTHING;
CREATE FUNCTION layer_tenants_memory() RETURNS trigger AS $$
BEGIN
    INSERT INTO layer_tenants (tenant) VALUES (NEW.tenant) ON CONFLICT DO NOTHING;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER layer_tenants_memory AFTER INSERT ON memories
    FOR EACH ROW EXECUTE FUNCTION layer_tenants_memory();
CREATE INDEX memories_by_tenant_rid ON memories (tenant, rid);
CREATE INDEX scene_versions_by_time ON scene_versions (tenant, created_at);
"""

M021_OFFLOAD_BACKLOG = """
CREATE INDEX offload_pairs_owed ON offload_pairs (tenant, session, received_at) WHERE done = 0;
CREATE INDEX offload_marks_unjudged ON offload_marks (tenant, session, ts) WHERE judged = 0;
CREATE INDEX offload_entries_unmapped ON offload_entries (tenant, session, created_at)
    WHERE task_id IS NOT NULL AND node_id IS NULL;
"""

#: What BM25 reads of each matching memory (`text_search.ranked`), read from this index alone
#: (an index-only scan): at 1M rows the join read a heap page of a wide row per posting.
M022_RANKING_COLUMNS = """
CREATE INDEX IF NOT EXISTS memories_ranking ON memories (rid)
    INCLUDE (tenant, valid_to, fts_len, id);
"""

#: The owner (lock grant) each fencing token was accepted from (`store.fencing_sql`); rows
#: from before keep no owner and accept an equal token from anyone, as they did.
M008_FENCE_OWNERS = "ALTER TABLE fences ADD COLUMN owner TEXT;"


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "turns, memories, their text index, meta and fencing tokens", M001_CORE),
    Migration(6, "pending embeddings by tenant, for a fair share", M006_PENDING_BY_TENANT),
    Migration(7, "pgvector: vectors per piece, catch-up marks, per-tenant ANN indexes",
              M007_VECTORS),
    Migration(8, "fencing tokens: the owner each was accepted from", M008_FENCE_OWNERS),
    Migration(9, "text totals in shards, for concurrent captures", M009_TOTAL_SHARDS),
    Migration(10, "layer state, receipts, scenes, profile, failure records", M010_LAYERS),
    Migration(13, "backlog: session heads, flush requests, tenants with memories", M013_BACKLOG),
    Migration(15, "authenticated receipts of every task type, and their keys", M015_RECEIPTS),
    Migration(17, "the execution log of pipeline tasks", M017_EXECUTIONS),
    Migration(18, "retention: executions and receipts by age", M018_LOG_RETENTION),
    Migration(20, "context offload: tool pairs, entries, refs, boundaries, tasks", M020_OFFLOAD),
    Migration(21, "backlog: indexes of owed offload work", M021_OFFLOAD_BACKLOG),
    Migration(22, "memories: BM25's columns in one index", M022_RANKING_COLUMNS),
    Migration(30, "service tenants and hashed API keys", M030_TENANTS),
)
