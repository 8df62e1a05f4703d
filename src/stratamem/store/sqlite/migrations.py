"""Named, versioned schema migrations, recorded in `schema_migrations`."""

from __future__ import annotations

import sqlite3
import time

from stratamem.errors import StoreError
from stratamem.store.migration import Migration
from stratamem.store.sqlite.backlog_schema import BACKLOG_OFFLOAD_MIGRATION
from stratamem.store.sqlite.layer_schema import LAYER_MIGRATIONS
from stratamem.store.sqlite.tenant_index import tenant_index_sql
from stratamem.store.sqlite.turn_context import turn_context_sql

_FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
# The full-text tables index a scope column too: the tenant's token (`scope.py`) and, for
# memories, whether the memory is current; so a tenant's query never walks other tenants' rows.

M001_TURNS = f"""
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
    metadata TEXT NOT NULL DEFAULT '{{}}',
    created_at REAL NOT NULL,
    scope_token TEXT NOT NULL,
    embedding BLOB,
    emb_seq INTEGER,
    UNIQUE (tenant, id)
);
CREATE INDEX turns_by_session ON turns (tenant, session, seq);
CREATE INDEX turns_by_time ON turns (tenant, ts);
CREATE INDEX turns_emb_pending ON turns (rid) WHERE embedding IS NULL;
CREATE INDEX turns_emb_seq ON turns (tenant, emb_seq) WHERE emb_seq IS NOT NULL;
CREATE VIRTUAL TABLE turns_fts USING fts5 (
    text, speaker, scope_token, content='turns', content_rowid='rid',
    tokenize='{_FTS_TOKENIZER}'
);
CREATE TRIGGER turns_ai AFTER INSERT ON turns BEGIN
    INSERT INTO turns_fts (rowid, text, speaker, scope_token)
    VALUES (new.rid, new.text, new.speaker, new.scope_token);
END;
CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
    INSERT INTO turns_fts (turns_fts, rowid, text, speaker, scope_token)
    VALUES ('delete', old.rid, old.text, old.speaker, old.scope_token);
END;
CREATE TRIGGER turns_au AFTER UPDATE OF text, speaker ON turns BEGIN
    INSERT INTO turns_fts (turns_fts, rowid, text, speaker, scope_token)
    VALUES ('delete', old.rid, old.text, old.speaker, old.scope_token);
    INSERT INTO turns_fts (rowid, text, speaker, scope_token)
    VALUES (new.rid, new.text, new.speaker, new.scope_token);
END;
"""

M002_MEMORIES = f"""
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
    metadata TEXT NOT NULL DEFAULT '{{}}',
    fts_scope TEXT NOT NULL,
    embedding BLOB,
    emb_seq INTEGER,
    UNIQUE (tenant, id)
);
CREATE INDEX memories_current ON memories (tenant, valid_to, type);
CREATE INDEX memories_by_session ON memories (tenant, session);
CREATE INDEX memories_superseded_by ON memories (tenant, superseded_by);
CREATE INDEX memories_emb_pending ON memories (rid) WHERE embedding IS NULL;
CREATE INDEX memories_emb_seq ON memories (tenant, emb_seq) WHERE emb_seq IS NOT NULL;
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, fts_scope, content='memories', content_rowid='rid', tokenize='{_FTS_TOKENIZER}'
);
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, fts_scope)
    VALUES (new.rid, new.content, new.fts_scope);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, fts_scope)
    VALUES ('delete', old.rid, old.content, old.fts_scope);
END;
CREATE TRIGGER memories_au AFTER UPDATE OF content, fts_scope ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content, fts_scope)
    VALUES ('delete', old.rid, old.content, old.fts_scope);
    INSERT INTO memories_fts (rowid, content, fts_scope)
    VALUES (new.rid, new.content, new.fts_scope);
END;
"""

M003_META = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""

M020_OFFLOAD = """
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
CREATE INDEX offload_pairs_pending ON offload_pairs (tenant, session, done, rid);
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
CREATE TABLE offload_boundaries (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    version INTEGER NOT NULL,
    active_task TEXT,
    last_mark_ts REAL,
    updated_at REAL NOT NULL,
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
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, session, task_id)
);
"""

M030_TENANTS = """
CREATE TABLE tenants (
    name TEXT PRIMARY KEY,
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    secret_sha256 TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant);
"""

# Version ranges by part, so parts can add migrations independently: 1-9 core (turns, memories),
# 10-19 memory layers (versions, scenes, profile, session state), 20-29 context offload,
# 30-39 service (tenants, keys).
M006_PENDING_BY_TENANT = """
CREATE INDEX turns_emb_pending_by_tenant ON turns (tenant, rid) WHERE embedding IS NULL;
CREATE INDEX memories_emb_pending_by_tenant ON memories (tenant, rid) WHERE embedding IS NULL;
"""

#: The owner (lock grant) each fencing token was accepted from (`store.fencing_sql`); rows
#: from before keep no owner and accept an equal token from anyone, as they did.
M008_FENCE_OWNERS = "ALTER TABLE fences ADD COLUMN owner TEXT;"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "turns with full-text index", M001_TURNS),
    Migration(2, "memories with full-text index", M002_MEMORIES),
    Migration(3, "meta and fencing tokens", M003_META),
    Migration(4, "turns indexed with neighbours and date", turn_context_sql(_FTS_TOKENIZER)),
    Migration(5, "full-text words prefixed by tenant", tenant_index_sql(_FTS_TOKENIZER)),
    Migration(6, "pending embeddings by tenant, for a fair share", M006_PENDING_BY_TENANT),
    Migration(8, "fencing tokens: the owner each was accepted from", M008_FENCE_OWNERS),
    *LAYER_MIGRATIONS,
    Migration(20, "context offload: tool pairs, entries, refs, boundaries, tasks", M020_OFFLOAD),
    BACKLOG_OFFLOAD_MIGRATION,
    Migration(30, "service tenants and hashed API keys", M030_TENANTS),
)


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply the migrations not yet recorded, each in its own transaction; return those applied."""
    done = applied_versions(conn)
    newest_known = max(m.version for m in migrations)
    if done and max(done) > newest_known:
        raise StoreError(
            f"the store's schema is at version {max(done)}, newer than this stratamem "
            f"knows ({newest_known}): upgrade stratamem"
        )
    applied: list[int] = []
    for migration in sorted(migrations, key=lambda m: m.version):
        if migration.version in done:
            continue
        _apply(conn, migration)
        applied.append(migration.version)
    return applied


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute(
            "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
        ).fetchone():
            conn.execute("ROLLBACK")  # another process applied it meanwhile
            return
        for statement in _statements(migration.sql):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, time.time()),
        )
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        conn.execute("ROLLBACK")
        raise StoreError(f"migration {migration.version} ({migration.name}) failed: {exc}") from exc


def _statements(sql: str) -> list[str]:
    """Split a migration script into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
