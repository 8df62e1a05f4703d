-- The schema of a stratamem store on SQLite: what a fresh database holds after
-- the migrations below. Written by `make schema` (scripts/schema.py) from a database
-- migrated now; tests/store/test_schema.py fails when the two differ. Not applied
-- from here: change the schema by a new migration, then run `make schema`.
--
-- Migrations:
--    1  turns with full-text index
--    2  memories with full-text index
--    3  meta and fencing tokens
--    4  turns indexed with neighbours and date
--    5  full-text words prefixed by tenant
--    6  pending embeddings by tenant, for a fair share
--    8  fencing tokens: the owner each was accepted from
--   10  layer state, receipts and failures
--   11  scene and profile versions
--   12  failure records of every LLM stage: quarantines, splits, drops
--   13  backlog: session heads, flush requests, tenants with memories
--   14  failure records: one per condition, automatic retries
--   15  authenticated receipts of every task type, and their keys
--   16  the turn ledger: each turn's L1 outcome
--   17  the execution log of pipeline tasks
--   18  retention: executions and receipts by age
--   20  context offload: tool pairs, entries, refs, boundaries, tasks
--   21  backlog: indexes of owed offload work
--   30  service tenants and hashed API keys
--   40  lineage: what scene and profile versions were built from
--   41  lineage: scenes and profiles to rebuild after a correction

CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    secret_sha256 TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    revoked_at REAL
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant);

CREATE TABLE executions (
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    delivery INTEGER NOT NULL,
    token INTEGER,
    worker TEXT NOT NULL,
    started_at REAL NOT NULL,
    type TEXT NOT NULL,
    session TEXT,
    lock_key TEXT,
    committed_at REAL,
    ended_at REAL,
    outcome TEXT,
    fenced_at REAL
);

CREATE INDEX executions_by_task ON executions (tenant, task_id);

CREATE INDEX executions_ended ON executions (ended_at) WHERE ended_at IS NOT NULL;

CREATE INDEX executions_open ON executions (tenant, lock_key)
    WHERE ended_at IS NULL AND fenced_at IS NULL;

CREATE TABLE failures (
    rid INTEGER PRIMARY KEY,
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
    failed_at REAL NOT NULL,
    resolved_at REAL, condition_key TEXT NOT NULL DEFAULT '', last_seen_at REAL, retry_at REAL, auto_retries INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, id)
);

CREATE INDEX failures_by_condition ON failures (tenant, stage, condition_key, status);

CREATE INDEX failures_by_tenant ON failures (tenant, rid);

CREATE INDEX failures_open ON failures (tenant, stage, status, session);

CREATE INDEX failures_retry_due ON failures (retry_at) WHERE retry_at IS NOT NULL;

CREATE TABLE fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL, owner TEXT);

CREATE TABLE layer_flush_requests (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    requested_at REAL NOT NULL,
    PRIMARY KEY (tenant, session)
);

CREATE TABLE layer_receipts (
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    completed_at REAL NOT NULL,
    result TEXT NOT NULL, outcome TEXT NOT NULL DEFAULT 'completed', attempt TEXT, key_id TEXT, mac TEXT,
    PRIMARY KEY (tenant, task_id)
);

CREATE INDEX layer_receipts_completed ON layer_receipts (completed_at, tenant, task_id);

CREATE TABLE layer_sessions (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    l1_runs INTEGER NOT NULL DEFAULT 0,
    last_l1_at REAL,
    last_l2_at REAL,
    PRIMARY KEY (tenant, session)
);

CREATE TRIGGER session_heads_cursor_ai AFTER INSERT ON layer_sessions BEGIN
    UPDATE session_heads SET cursor_seq = new.cursor_seq
    WHERE tenant = new.tenant AND session = new.session;
END;

CREATE TRIGGER session_heads_cursor_au AFTER UPDATE OF cursor_seq ON layer_sessions BEGIN
    UPDATE session_heads SET cursor_seq = new.cursor_seq
    WHERE tenant = new.tenant AND session = new.session;
END;

CREATE TABLE layer_tenants (
    tenant TEXT PRIMARY KEY,
    l2_mark INTEGER NOT NULL DEFAULT 0,
    memories_since_l3 INTEGER NOT NULL DEFAULT 0,
    last_l2_at REAL,
    last_l3_at REAL
);

CREATE TABLE lineage (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    source_kind TEXT NOT NULL,
    source_id TEXT NOT NULL,
    source_version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, kind, id, version, source_kind, source_id, source_version)
);

CREATE INDEX lineage_by_source ON lineage (tenant, source_kind, source_id);

CREATE TABLE lineage_stale (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    reason TEXT NOT NULL,
    marked_at REAL NOT NULL,
    PRIMARY KEY (tenant, kind, id)
);

CREATE TABLE memories (
    rid INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    priority INTEGER NOT NULL,
    source_turn_ids TEXT NOT NULL,
    session TEXT,
    activity_start REAL,
    activity_end REAL,
    valid_from REAL NOT NULL,
    valid_to REAL,
    superseded_by TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    mode TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    fts_scope TEXT NOT NULL,
    embedding BLOB,
    emb_seq INTEGER,
    UNIQUE (tenant, id)
);

CREATE INDEX memories_by_session ON memories (tenant, session);

CREATE INDEX memories_by_tenant_rid ON memories (tenant, rid);

CREATE INDEX memories_current ON memories (tenant, valid_to, type);

CREATE INDEX memories_emb_pending ON memories (rid) WHERE embedding IS NULL;

CREATE INDEX memories_emb_pending_by_tenant ON memories (tenant, rid) WHERE embedding IS NULL;

CREATE INDEX memories_emb_seq ON memories (tenant, emb_seq) WHERE emb_seq IS NOT NULL;

CREATE INDEX memories_superseded_by ON memories (tenant, superseded_by);

CREATE TRIGGER layer_tenants_memory AFTER INSERT ON memories BEGIN
    INSERT OR IGNORE INTO layer_tenants (tenant) VALUES (new.tenant);
END;

CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.rid;
END;

CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, fts_scope)
    VALUES (new.rid, tenant_words(new.tenant, new.content), new.fts_scope);
END;

CREATE TRIGGER memories_au AFTER UPDATE OF content, fts_scope ON memories BEGIN
    UPDATE memories_fts SET content = tenant_words(new.tenant, new.content), fts_scope = new.fts_scope
    WHERE rowid = new.rid;
END;

CREATE VIRTUAL TABLE memories_fts USING fts5 (content, fts_scope, tokenize='porter unicode61 remove_diacritics 2');

CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE offload_boundaries (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    version INTEGER NOT NULL,
    active_task TEXT,
    last_mark_ts REAL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session)
);

CREATE TABLE offload_entries (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,
    score INTEGER NOT NULL,
    ref_id TEXT NOT NULL,
    ts REAL NOT NULL,
    result_chars INTEGER NOT NULL,
    mode TEXT NOT NULL,
    task_id TEXT,
    node_id TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant, session, call_id)
);

CREATE INDEX offload_entries_by_task ON offload_entries (tenant, session, task_id, node_id);

CREATE INDEX offload_entries_by_time ON offload_entries (tenant, session, ts);

CREATE INDEX offload_entries_unmapped ON offload_entries (tenant, session, created_at)
    WHERE task_id IS NOT NULL AND node_id IS NULL;

CREATE TABLE offload_marks (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    mark_id TEXT NOT NULL,
    ts REAL NOT NULL,
    text TEXT NOT NULL,
    task_id TEXT,
    judged INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session, mark_id)
);

CREATE INDEX offload_marks_by_time ON offload_marks (tenant, session, ts);

CREATE INDEX offload_marks_unjudged ON offload_marks (tenant, session, ts) WHERE judged = 0;

CREATE TABLE offload_pairs (
    rid INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    params TEXT NOT NULL,
    result TEXT,
    error TEXT,
    ts REAL NOT NULL,
    duration_ms REAL,
    received_at REAL NOT NULL,
    claim_id TEXT,
    claim_expires REAL,
    done INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, session, call_id)
);

CREATE INDEX offload_pairs_owed ON offload_pairs (tenant, session, received_at) WHERE done = 0;

CREATE INDEX offload_pairs_pending ON offload_pairs (tenant, session, done, rid);

CREATE TABLE offload_refs (
    tenant TEXT NOT NULL,
    ref_id TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant, ref_id)
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
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session, task_id)
);

CREATE TABLE profile_versions (
    tenant TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    updated_at REAL NOT NULL,
    mode TEXT NOT NULL,
    current INTEGER NOT NULL,
    PRIMARY KEY (tenant, version)
);

CREATE TABLE receipt_keys (
    id TEXT PRIMARY KEY,
    secret BLOB NOT NULL,
    created_at REAL NOT NULL,
    retired_at REAL
);

CREATE TABLE scene_versions (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    body TEXT NOT NULL,
    heat REAL NOT NULL,
    memory_ids TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    deleted INTEGER NOT NULL,
    mode TEXT NOT NULL,
    current INTEGER NOT NULL,
    PRIMARY KEY (tenant, id, version)
);

CREATE INDEX scene_versions_by_time ON scene_versions (tenant, created_at);

CREATE INDEX scene_versions_current ON scene_versions (tenant, current);

CREATE TABLE schema_migrations ( version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);

CREATE TABLE session_heads (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_turn_at REAL NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session)
);

CREATE INDEX session_heads_owed ON session_heads (tenant, session) WHERE last_seq > cursor_seq;

CREATE TABLE tenants (
    name TEXT PRIMARY KEY,
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);

CREATE TABLE turn_outcomes (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    task_id TEXT NOT NULL,
    decided_at REAL,
    memory_ids TEXT NOT NULL,
    failure_ids TEXT NOT NULL,
    PRIMARY KEY (tenant, turn_id)
);

CREATE INDEX turn_outcomes_by_session ON turn_outcomes (tenant, session, outcome, seq);

CREATE TABLE turns (
    rid INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT,
    text TEXT NOT NULL,
    ts REAL NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    scope_token TEXT NOT NULL,
    embedding BLOB,
    emb_seq INTEGER,
    UNIQUE (tenant, id)
);

CREATE INDEX turns_by_session ON turns (tenant, session, seq);

CREATE INDEX turns_by_time ON turns (tenant, ts);

CREATE INDEX turns_emb_pending ON turns (rid) WHERE embedding IS NULL;

CREATE INDEX turns_emb_pending_by_tenant ON turns (tenant, rid) WHERE embedding IS NULL;

CREATE INDEX turns_emb_seq ON turns (tenant, emb_seq) WHERE emb_seq IS NOT NULL;

CREATE TRIGGER session_heads_turn AFTER INSERT ON turns BEGIN
    INSERT OR IGNORE INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
    VALUES (new.tenant, new.session, new.seq, new.ts, COALESCE((SELECT cursor_seq FROM
        layer_sessions WHERE tenant = new.tenant AND session = new.session), 0));
    UPDATE session_heads SET last_seq = max(last_seq, new.seq),
        last_turn_at = max(last_turn_at, new.ts)
    WHERE tenant = new.tenant AND session = new.session;
END;

CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
    DELETE FROM turns_fts WHERE rowid = old.rid;
END;

CREATE TRIGGER turns_ai AFTER INSERT ON turns BEGIN
    INSERT INTO turns_fts (rowid, text, speaker, context, around, dated, scope_token)
    VALUES (new.rid, tenant_words(new.tenant, new.text), tenant_words(new.tenant, new.speaker),
            tenant_words(new.tenant, COALESCE((SELECT n.text FROM turns n WHERE n.tenant = new.tenant AND n.session = new.session AND n.seq = new.seq -1), '')), tenant_words(new.tenant, COALESCE((SELECT n.text FROM turns n WHERE n.tenant = new.tenant AND n.session = new.session AND n.seq = new.seq -2), '')),
            tenant_words(new.tenant, CAST(strftime('%d', new.ts, 'unixepoch') AS INTEGER) || ' ' || rtrim(substr('January  February March    April    May      June     July     August   SeptemberOctober  November December ', CAST(strftime('%m', new.ts, 'unixepoch') AS INTEGER) * 9 - 8, 9)) || ' ' || strftime('%Y', new.ts, 'unixepoch')), new.scope_token);
    UPDATE turns_fts SET around = trim(around || ' ' || tenant_words(new.tenant, new.text))
    WHERE rowid = (SELECT p.rid FROM turns p WHERE p.tenant = new.tenant
                   AND p.session = new.session AND p.seq = new.seq - 1);
END;

CREATE TRIGGER turns_au AFTER UPDATE OF text, speaker ON turns BEGIN
    UPDATE turns_fts SET text = tenant_words(new.tenant, new.text),
                         speaker = tenant_words(new.tenant, new.speaker)
    WHERE rowid = new.rid;
END;

CREATE VIRTUAL TABLE turns_fts USING fts5 (
    text, speaker, context, around, dated, scope_token, tokenize='porter unicode61 remove_diacritics 2'
);
