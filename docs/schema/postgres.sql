-- The schema of a stratamem store on PostgreSQL: what a fresh database holds after
-- the migrations below. Written by `make schema` (scripts/schema.py) from a database
-- migrated now; tests/store/test_schema.py fails when the two differ. Not applied
-- from here: change the schema by a new migration, then run `make schema`.
--
-- Migrations:
--    1  turns, memories, their text index, meta and fencing tokens
--    6  pending embeddings by tenant, for a fair share
--    7  pgvector: vectors per piece, catch-up marks, per-tenant ANN indexes
--    8  fencing tokens: the owner each was accepted from
--    9  text totals in shards, for concurrent captures
--   10  layer state, receipts, scenes, profile, failure records
--   13  backlog: session heads, flush requests, tenants with memories
--   14  failure records: one per condition, automatic retries
--   15  authenticated receipts of every task type, and their keys
--   16  the turn ledger: each turn's L1 outcome
--   17  the execution log of pipeline tasks
--   18  retention: executions and receipts by age
--   20  context offload: tool pairs, entries, refs, boundaries, tasks
--   21  backlog: indexes of owed offload work
--   22  memories: BM25's columns in one index
--   30  service tenants and hashed API keys
--   40  lineage: what scene and profile versions were built from
--   41  lineage: scenes and profiles to rebuild after a correction

CREATE EXTENSION vector;

CREATE SEQUENCE emb_seq AS bigint START WITH 1 INCREMENT BY 1;

CREATE OR REPLACE FUNCTION public.layer_tenants_memory()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO layer_tenants (tenant) VALUES (NEW.tenant) ON CONFLICT DO NOTHING;
    RETURN NEW;
END $function$;

CREATE OR REPLACE FUNCTION public.session_heads_cursor()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE session_heads SET cursor_seq = NEW.cursor_seq
    WHERE tenant = NEW.tenant AND session = NEW.session;
    RETURN NEW;
END $function$;

CREATE OR REPLACE FUNCTION public.session_heads_turn()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
    VALUES (NEW.tenant, NEW.session, NEW.seq, NEW.ts, COALESCE((SELECT cursor_seq FROM
        layer_sessions WHERE tenant = NEW.tenant AND session = NEW.session), 0))
    ON CONFLICT (tenant, session) DO UPDATE
    SET last_seq = GREATEST(session_heads.last_seq, EXCLUDED.last_seq),
        last_turn_at = GREATEST(session_heads.last_turn_at, EXCLUDED.last_turn_at);
    RETURN NEW;
END $function$;

CREATE TABLE api_keys (
    rowid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    key_id text NOT NULL,
    tenant text NOT NULL,
    secret_sha256 text NOT NULL,
    label text DEFAULT ''::text NOT NULL,
    created_at double precision NOT NULL,
    revoked_at double precision,
    CONSTRAINT api_keys_pkey PRIMARY KEY (key_id),
    CONSTRAINT api_keys_tenant_fkey FOREIGN KEY (tenant) REFERENCES tenants(name)
);

CREATE INDEX api_keys_by_tenant ON public.api_keys USING btree (tenant);

CREATE TABLE executions (
    rowid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    tenant text NOT NULL,
    task_id text NOT NULL,
    attempt integer NOT NULL,
    delivery integer NOT NULL,
    token bigint,
    worker text NOT NULL,
    started_at double precision NOT NULL,
    type text NOT NULL,
    session text,
    lock_key text,
    committed_at double precision,
    ended_at double precision,
    outcome text,
    fenced_at double precision
);

CREATE INDEX executions_by_task ON public.executions USING btree (tenant, task_id);

CREATE INDEX executions_ended ON public.executions USING btree (ended_at, rowid) WHERE (ended_at IS NOT NULL);

CREATE INDEX executions_open ON public.executions USING btree (tenant, lock_key) WHERE ((ended_at IS NULL) AND (fenced_at IS NULL));

CREATE TABLE failures (
    rid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    tenant text NOT NULL,
    id text NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    stage text NOT NULL,
    session text,
    task_id text NOT NULL,
    error text NOT NULL,
    raws text NOT NULL,
    turn_ids text DEFAULT '[]'::text NOT NULL,
    detail text DEFAULT '{}'::text NOT NULL,
    attempts integer DEFAULT 1 NOT NULL,
    failed_at double precision NOT NULL,
    resolved_at double precision,
    condition_key text DEFAULT ''::text NOT NULL,
    last_seen_at double precision,
    retry_at double precision,
    auto_retries integer DEFAULT 0 NOT NULL,
    CONSTRAINT failures_pkey PRIMARY KEY (rid),
    CONSTRAINT failures_tenant_id_key UNIQUE (tenant, id)
);

CREATE INDEX failures_by_condition ON public.failures USING btree (tenant, stage, condition_key, status);

CREATE INDEX failures_by_tenant ON public.failures USING btree (tenant, rid);

CREATE INDEX failures_open ON public.failures USING btree (tenant, stage, status, session);

CREATE INDEX failures_retry_due ON public.failures USING btree (retry_at) WHERE (retry_at IS NOT NULL);

CREATE TABLE fences (
    key text NOT NULL,
    token bigint NOT NULL,
    owner text,
    CONSTRAINT fences_pkey PRIMARY KEY (key)
);

CREATE TABLE layer_flush_requests (
    tenant text NOT NULL,
    session text NOT NULL,
    requested_at double precision NOT NULL,
    CONSTRAINT layer_flush_requests_pkey PRIMARY KEY (tenant, session)
);

CREATE TABLE layer_receipts (
    tenant text NOT NULL,
    task_id text NOT NULL,
    kind text NOT NULL,
    completed_at double precision NOT NULL,
    result text NOT NULL,
    outcome text DEFAULT 'completed'::text NOT NULL,
    attempt text,
    key_id text,
    mac text,
    CONSTRAINT layer_receipts_pkey PRIMARY KEY (tenant, task_id)
);

CREATE INDEX layer_receipts_completed ON public.layer_receipts USING btree (completed_at, tenant, task_id);

CREATE TABLE layer_sessions (
    tenant text NOT NULL,
    session text NOT NULL,
    cursor_seq integer DEFAULT 0 NOT NULL,
    l1_runs integer DEFAULT 0 NOT NULL,
    last_l1_at double precision,
    last_l2_at double precision,
    CONSTRAINT layer_sessions_pkey PRIMARY KEY (tenant, session)
);

CREATE TRIGGER session_heads_cursor AFTER INSERT OR UPDATE OF cursor_seq ON public.layer_sessions FOR EACH ROW EXECUTE FUNCTION session_heads_cursor();

CREATE TABLE layer_tenants (
    tenant text NOT NULL,
    l2_mark bigint DEFAULT 0 NOT NULL,
    memories_since_l3 integer DEFAULT 0 NOT NULL,
    last_l2_at double precision,
    last_l3_at double precision,
    CONSTRAINT layer_tenants_pkey PRIMARY KEY (tenant)
);

CREATE TABLE lineage (
    tenant text NOT NULL,
    kind text NOT NULL,
    id text NOT NULL,
    version integer NOT NULL,
    source_kind text NOT NULL,
    source_id text NOT NULL,
    source_version integer DEFAULT 0 NOT NULL,
    CONSTRAINT lineage_pkey PRIMARY KEY (tenant, kind, id, version, source_kind, source_id, source_version)
);

CREATE INDEX lineage_by_source ON public.lineage USING btree (tenant, source_kind, source_id);

CREATE TABLE lineage_stale (
    tenant text NOT NULL,
    kind text NOT NULL,
    id text NOT NULL,
    reason text NOT NULL,
    marked_at double precision NOT NULL,
    CONSTRAINT lineage_stale_pkey PRIMARY KEY (tenant, kind, id)
);

CREATE TABLE memories (
    rid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    tenant text NOT NULL,
    id text NOT NULL,
    type text NOT NULL,
    content text NOT NULL,
    priority integer NOT NULL,
    source_turn_ids text NOT NULL,
    session text,
    activity_start double precision,
    activity_end double precision,
    valid_from double precision NOT NULL,
    valid_to double precision,
    superseded_by text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    mode text NOT NULL,
    metadata text DEFAULT '{}'::text NOT NULL,
    fts_scope text NOT NULL,
    embedding bytea,
    emb_seq bigint,
    fts_len integer,
    fts_dirty boolean DEFAULT true NOT NULL,
    CONSTRAINT memories_pkey PRIMARY KEY (rid),
    CONSTRAINT memories_tenant_id_key UNIQUE (tenant, id)
);

CREATE INDEX memories_by_rid ON public.memories USING btree (tenant, rid);

CREATE INDEX memories_by_session ON public.memories USING btree (tenant, session);

CREATE INDEX memories_by_tenant_rid ON public.memories USING btree (tenant, rid);

CREATE INDEX memories_current ON public.memories USING btree (tenant, valid_to, type);

CREATE INDEX memories_emb_pending ON public.memories USING btree (rid) WHERE (embedding IS NULL);

CREATE INDEX memories_emb_pending_by_tenant ON public.memories USING btree (tenant, rid) WHERE (embedding IS NULL);

CREATE INDEX memories_emb_seq ON public.memories USING btree (tenant, emb_seq) WHERE (emb_seq IS NOT NULL);

CREATE INDEX memories_fts_pending ON public.memories USING btree (tenant, rid) WHERE fts_dirty;

CREATE INDEX memories_ranking ON public.memories USING btree (rid) INCLUDE (tenant, valid_to, fts_len, id);

CREATE INDEX memories_superseded_by ON public.memories USING btree (tenant, superseded_by);

CREATE TRIGGER layer_tenants_memory AFTER INSERT ON public.memories FOR EACH ROW EXECUTE FUNCTION layer_tenants_memory();

CREATE TABLE memory_terms (
    tenant text NOT NULL,
    term text NOT NULL,
    rid bigint NOT NULL,
    tf real[] NOT NULL,
    CONSTRAINT memory_terms_pkey PRIMARY KEY (tenant, term, rid),
    CONSTRAINT memory_terms_rid_fkey FOREIGN KEY (rid) REFERENCES memories(rid) ON DELETE CASCADE
);

CREATE INDEX memory_terms_by_rid ON public.memory_terms USING btree (rid);

CREATE TABLE memory_vectors (
    rid bigint NOT NULL,
    piece smallint NOT NULL,
    tenant text NOT NULL,
    seq bigint NOT NULL,
    embedding vector NOT NULL,
    CONSTRAINT memory_vectors_pkey PRIMARY KEY (rid, piece),
    CONSTRAINT memory_vectors_rid_fkey FOREIGN KEY (rid) REFERENCES memories(rid) ON DELETE CASCADE
);

CREATE INDEX memory_vectors_by_tenant ON public.memory_vectors USING btree (tenant);

CREATE TABLE meta (
    key text NOT NULL,
    value text NOT NULL,
    CONSTRAINT meta_pkey PRIMARY KEY (key)
);

CREATE TABLE offload_boundaries (
    tenant text NOT NULL,
    session text NOT NULL,
    version integer NOT NULL,
    active_task text,
    last_mark_ts double precision,
    updated_at double precision NOT NULL,
    CONSTRAINT offload_boundaries_pkey PRIMARY KEY (tenant, session)
);

CREATE TABLE offload_entries (
    tenant text NOT NULL,
    session text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    summary text NOT NULL,
    score integer NOT NULL,
    ref_id text NOT NULL,
    ts double precision NOT NULL,
    result_chars integer NOT NULL,
    mode text NOT NULL,
    task_id text,
    node_id text,
    created_at double precision NOT NULL,
    CONSTRAINT offload_entries_pkey PRIMARY KEY (tenant, session, call_id)
);

CREATE INDEX offload_entries_by_task ON public.offload_entries USING btree (tenant, session, task_id, node_id);

CREATE INDEX offload_entries_by_time ON public.offload_entries USING btree (tenant, session, ts);

CREATE INDEX offload_entries_unmapped ON public.offload_entries USING btree (tenant, session, created_at) WHERE ((task_id IS NOT NULL) AND (node_id IS NULL));

CREATE TABLE offload_marks (
    tenant text NOT NULL,
    session text NOT NULL,
    mark_id text NOT NULL,
    ts double precision NOT NULL,
    text text NOT NULL,
    task_id text,
    judged integer DEFAULT 0 NOT NULL,
    CONSTRAINT offload_marks_pkey PRIMARY KEY (tenant, session, mark_id)
);

CREATE INDEX offload_marks_by_time ON public.offload_marks USING btree (tenant, session, ts);

CREATE INDEX offload_marks_unjudged ON public.offload_marks USING btree (tenant, session, ts) WHERE (judged = 0);

CREATE TABLE offload_pairs (
    rid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    tenant text NOT NULL,
    session text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    params text NOT NULL,
    result text,
    error text,
    ts double precision NOT NULL,
    duration_ms double precision,
    received_at double precision NOT NULL,
    claim_id text,
    claim_expires double precision,
    done integer DEFAULT 0 NOT NULL,
    CONSTRAINT offload_pairs_pkey PRIMARY KEY (rid),
    CONSTRAINT offload_pairs_tenant_session_call_id_key UNIQUE (tenant, session, call_id)
);

CREATE INDEX offload_pairs_owed ON public.offload_pairs USING btree (tenant, session, received_at) WHERE (done = 0);

CREATE INDEX offload_pairs_pending ON public.offload_pairs USING btree (tenant, session, done, rid);

CREATE TABLE offload_refs (
    tenant text NOT NULL,
    ref_id text NOT NULL,
    session text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    content text NOT NULL,
    created_at double precision NOT NULL,
    CONSTRAINT offload_refs_pkey PRIMARY KEY (tenant, ref_id)
);

CREATE TABLE offload_tasks (
    tenant text NOT NULL,
    session text NOT NULL,
    task_id text NOT NULL,
    label text NOT NULL,
    status text NOT NULL,
    long_task integer DEFAULT 0 NOT NULL,
    mermaid text DEFAULT ''::text NOT NULL,
    version integer DEFAULT 0 NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    CONSTRAINT offload_tasks_pkey PRIMARY KEY (tenant, session, task_id)
);

CREATE TABLE profile_versions (
    tenant text NOT NULL,
    version integer NOT NULL,
    body text NOT NULL,
    updated_at double precision NOT NULL,
    mode text NOT NULL,
    current integer NOT NULL,
    CONSTRAINT profile_versions_pkey PRIMARY KEY (tenant, version)
);

CREATE TABLE receipt_keys (
    rowid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    id text NOT NULL,
    secret bytea NOT NULL,
    created_at double precision NOT NULL,
    retired_at double precision,
    CONSTRAINT receipt_keys_pkey PRIMARY KEY (id)
);

CREATE TABLE scene_versions (
    tenant text NOT NULL,
    id text NOT NULL,
    version integer NOT NULL,
    title text NOT NULL,
    summary text NOT NULL,
    body text NOT NULL,
    heat double precision NOT NULL,
    memory_ids text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    deleted integer NOT NULL,
    mode text NOT NULL,
    current integer NOT NULL,
    CONSTRAINT scene_versions_pkey PRIMARY KEY (tenant, id, version)
);

CREATE INDEX scene_versions_by_time ON public.scene_versions USING btree (tenant, created_at);

CREATE INDEX scene_versions_current ON public.scene_versions USING btree (tenant, current);

CREATE TABLE schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at double precision NOT NULL,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE session_heads (
    tenant text NOT NULL,
    session text NOT NULL,
    last_seq integer NOT NULL,
    last_turn_at double precision NOT NULL,
    cursor_seq integer DEFAULT 0 NOT NULL,
    CONSTRAINT session_heads_pkey PRIMARY KEY (tenant, session)
);

CREATE INDEX session_heads_owed ON public.session_heads USING btree (tenant, session) WHERE (last_seq > cursor_seq);

CREATE TABLE tenants (
    name text NOT NULL,
    label text DEFAULT ''::text NOT NULL,
    created_at double precision NOT NULL,
    CONSTRAINT tenants_pkey PRIMARY KEY (name)
);

CREATE TABLE text_totals (
    tenant text NOT NULL,
    layer text NOT NULL,
    rows bigint DEFAULT 0 NOT NULL,
    tokens bigint DEFAULT 0 NOT NULL,
    shard smallint DEFAULT 0 NOT NULL,
    CONSTRAINT text_totals_pkey PRIMARY KEY (tenant, layer, shard)
);

CREATE TABLE turn_outcomes (
    tenant text NOT NULL,
    session text NOT NULL,
    turn_id text NOT NULL,
    seq integer NOT NULL,
    outcome text NOT NULL,
    task_id text NOT NULL,
    decided_at double precision,
    memory_ids text NOT NULL,
    failure_ids text NOT NULL,
    CONSTRAINT turn_outcomes_pkey PRIMARY KEY (tenant, turn_id)
);

CREATE INDEX turn_outcomes_by_session ON public.turn_outcomes USING btree (tenant, session, outcome, seq);

CREATE TABLE turn_terms (
    tenant text NOT NULL,
    term text NOT NULL,
    rid bigint NOT NULL,
    tf real[] NOT NULL,
    CONSTRAINT turn_terms_pkey PRIMARY KEY (tenant, term, rid),
    CONSTRAINT turn_terms_rid_fkey FOREIGN KEY (rid) REFERENCES turns(rid) ON DELETE CASCADE
);

CREATE INDEX turn_terms_by_rid ON public.turn_terms USING btree (rid);

CREATE TABLE turn_vectors (
    rid bigint NOT NULL,
    piece smallint NOT NULL,
    tenant text NOT NULL,
    seq bigint NOT NULL,
    embedding vector NOT NULL,
    CONSTRAINT turn_vectors_pkey PRIMARY KEY (rid, piece),
    CONSTRAINT turn_vectors_rid_fkey FOREIGN KEY (rid) REFERENCES turns(rid) ON DELETE CASCADE
);

CREATE INDEX turn_vectors_by_tenant ON public.turn_vectors USING btree (tenant);

CREATE TABLE turns (
    rid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    tenant text NOT NULL,
    id text NOT NULL,
    session text NOT NULL,
    seq integer NOT NULL,
    role text NOT NULL,
    speaker text,
    text text NOT NULL,
    ts double precision NOT NULL,
    metadata text DEFAULT '{}'::text NOT NULL,
    created_at double precision NOT NULL,
    embedding bytea,
    emb_seq bigint,
    fts_len integer,
    fts_dirty boolean DEFAULT true NOT NULL,
    CONSTRAINT turns_pkey PRIMARY KEY (rid),
    CONSTRAINT turns_tenant_id_key UNIQUE (tenant, id)
);

CREATE INDEX turns_by_session ON public.turns USING btree (tenant, session, seq);

CREATE INDEX turns_by_time ON public.turns USING btree (tenant, ts);

CREATE INDEX turns_emb_pending ON public.turns USING btree (rid) WHERE (embedding IS NULL);

CREATE INDEX turns_emb_pending_by_tenant ON public.turns USING btree (tenant, rid) WHERE (embedding IS NULL);

CREATE INDEX turns_emb_seq ON public.turns USING btree (tenant, emb_seq) WHERE (emb_seq IS NOT NULL);

CREATE INDEX turns_fts_pending ON public.turns USING btree (tenant, rid) WHERE fts_dirty;

CREATE TRIGGER session_heads_turn AFTER INSERT ON public.turns FOR EACH ROW EXECUTE FUNCTION session_heads_turn();

CREATE TABLE vector_indexes (
    tenant text NOT NULL,
    layer text NOT NULL,
    dim integer NOT NULL,
    name text NOT NULL,
    pieces_per_record double precision NOT NULL,
    built_at double precision NOT NULL,
    CONSTRAINT vector_indexes_pkey PRIMARY KEY (tenant, layer)
);

CREATE TABLE vector_marks (
    tenant text NOT NULL,
    layer text NOT NULL,
    seq bigint NOT NULL,
    CONSTRAINT vector_marks_pkey PRIMARY KEY (tenant, layer)
);
