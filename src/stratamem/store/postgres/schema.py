"""PostgreSQL's migrations, mirroring the SQLite store's parts: 1-9 core (turns, memories,
their text index), 10-19 memory layers, 20-29 context offload, 30-39 service.

The tables both databases hold are defined once, in their families' `schema.py`
(`store/migration.py` says how): columns keep the same names and meanings (so the shared record
modules run unchanged): times are epoch seconds (`DOUBLE PRECISION`), flags are integers, JSON
is text. Here is what is PostgreSQL's own: the text index, a table of terms per row
(`text_index.py`) with per-tenant totals; pgvector's rows of each record's vectors
(`vector_index.py`); and the backlog's triggers. The schema they add up to is
`docs/schema/postgres.sql`.
"""

from __future__ import annotations

from stratamem.store.core import schema as core
from stratamem.store.evidence import schema as evidence
from stratamem.store.failures.schema import FAILURES
from stratamem.store.layers import schema as layers
from stratamem.store.migration import Migration, rendered
from stratamem.store.shared_schema import SHARED

TEXT_INDEX = """
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
"""
EMBEDDING_SEQUENCE = "CREATE SEQUENCE emb_seq;\n"

# A tenant's text totals in shards (`text_index.TOTAL_SHARDS`), so that captures of different
# sessions, each indexing its turns in its own transaction, do not queue for one row.
M009_TOTAL_SHARDS = """
ALTER TABLE text_totals ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE text_totals DROP CONSTRAINT text_totals_pkey;
ALTER TABLE text_totals ADD PRIMARY KEY (tenant, layer, shard);
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

#: Migration 13's triggers: `session_heads` follows each new turn and the layers' cursor; a
#: tenant with a memory has a `layer_tenants` row.
SESSION_HEADS_TRIGGERS = """CREATE FUNCTION session_heads_turn() RETURNS trigger AS $$
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
"""
TENANTS_WITH_MEMORIES = """
INSERT INTO layer_tenants (tenant) SELECT DISTINCT tenant FROM memories ON CONFLICT DO NOTHING;
CREATE FUNCTION layer_tenants_memory() RETURNS trigger AS $$
BEGIN
    INSERT INTO layer_tenants (tenant) VALUES (NEW.tenant) ON CONFLICT DO NOTHING;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER layer_tenants_memory AFTER INSERT ON memories
    FOR EACH ROW EXECUTE FUNCTION layer_tenants_memory();
"""

#: What BM25 reads of each matching memory (`text_search.ranked`), read from this index alone
#: (an index-only scan): at 1M rows the join read a heap page of a wide row per posting.
M022_RANKING_COLUMNS = """
CREATE INDEX IF NOT EXISTS memories_ranking ON memories (rid)
    INCLUDE (tenant, valid_to, fts_len, id);
"""


MIGRATIONS: tuple[Migration, ...] = rendered("postgres", (
    Migration(1, "turns, memories, their text index, meta and fencing tokens",
              core.TURNS + core.MEMORIES + TEXT_INDEX + core.META + EMBEDDING_SEQUENCE),
    Migration(7, "pgvector: vectors per piece, catch-up marks, per-tenant ANN indexes",
              M007_VECTORS),
    Migration(9, "text totals in shards, for concurrent captures", M009_TOTAL_SHARDS),
    Migration(10, "layer state, receipts, scenes, profile, failure records",
              layers.LAYER_STATE + evidence.RECEIPTS + layers.SCENES_PROFILE + FAILURES),
    layers.backlog_migration(SESSION_HEADS_TRIGGERS + TENANTS_WITH_MEMORIES),
    Migration(22, "memories: BM25's columns in one index", M022_RANKING_COLUMNS),
    *SHARED,
))  # fmt: skip
