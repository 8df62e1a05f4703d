"""SQLite's migrations, recorded in `schema_migrations`, and applying them on open.

The tables both databases hold are defined once, in their families' `schema.py`
(`store/migration.py` says how); here is what is SQLite's own: the FTS5 full-text indexes and
their triggers (the turns' index: `turn_context.py`, `tenant_index.py`), the backlog's triggers,
and the failure table of migration 10 that 12 replaced. The schema they add up to is
`docs/schema/sqlite.sql`.

Version ranges by part, so parts can add migrations independently: 1-9 core (turns, memories),
10-19 memory layers (versions, scenes, profile, session state), 20-29 context offload, 30-39
service (tenants, keys).
"""

from __future__ import annotations

import sqlite3
import time

from stratamem.errors import StoreError
from stratamem.store.core import schema as core
from stratamem.store.evidence import schema as evidence
from stratamem.store.failures.schema import FAILURES
from stratamem.store.layers import schema as layers
from stratamem.store.migration import Migration, rendered
from stratamem.store.shared_schema import SHARED
from stratamem.store.sqlite.tenant_index import tenant_index_sql
from stratamem.store.sqlite.turn_context import turn_context_sql

_FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
# The full-text tables index a scope column too: the tenant's token (`scope.py`) and, for
# memories, whether the memory is current; so a tenant's query never walks other tenants' rows.

TURNS_FTS = f"""CREATE VIRTUAL TABLE turns_fts USING fts5 (
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

MEMORIES_FTS = f"""CREATE VIRTUAL TABLE memories_fts USING fts5 (
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

#: Migration 10's failure records, one table for the layers' failed stages (12 replaced it).
LAYER_FAILURES = """CREATE TABLE layer_failures (
    rid INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    session TEXT,
    stage TEXT NOT NULL,
    error TEXT NOT NULL,
    raws TEXT NOT NULL,
    failed_at REAL NOT NULL
);
CREATE INDEX layer_failures_by_tenant ON layer_failures (tenant, rid);
"""

FAILURES_FROM_LAYER_FAILURES = """
INSERT INTO failures (tenant, id, kind, status, stage, session, task_id, error, raws, failed_at)
SELECT tenant, 'f_' || lower(hex(randomblob(12))), 'stage', 'open', stage, session, task_id,
       error, raws, failed_at
FROM layer_failures ORDER BY rid;
DROP TABLE layer_failures;
"""

#: Migration 13's triggers: `session_heads` follows each new turn and the layers' cursor; a
#: tenant with a memory has a `layer_tenants` row.
SESSION_HEADS_TRIGGERS = """CREATE TRIGGER session_heads_turn AFTER INSERT ON turns BEGIN
    INSERT OR IGNORE INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
    VALUES (new.tenant, new.session, new.seq, new.ts, COALESCE((SELECT cursor_seq FROM
        layer_sessions WHERE tenant = new.tenant AND session = new.session), 0));
    UPDATE session_heads SET last_seq = max(last_seq, new.seq),
        last_turn_at = max(last_turn_at, new.ts)
    WHERE tenant = new.tenant AND session = new.session;
END;
CREATE TRIGGER session_heads_cursor_ai AFTER INSERT ON layer_sessions BEGIN
    UPDATE session_heads SET cursor_seq = new.cursor_seq
    WHERE tenant = new.tenant AND session = new.session;
END;
CREATE TRIGGER session_heads_cursor_au AFTER UPDATE OF cursor_seq ON layer_sessions BEGIN
    UPDATE session_heads SET cursor_seq = new.cursor_seq
    WHERE tenant = new.tenant AND session = new.session;
END;
"""
TENANTS_WITH_MEMORIES = """
INSERT OR IGNORE INTO layer_tenants (tenant) SELECT DISTINCT tenant FROM memories;
CREATE TRIGGER layer_tenants_memory AFTER INSERT ON memories BEGIN
    INSERT OR IGNORE INTO layer_tenants (tenant) VALUES (new.tenant);
END;
"""

MIGRATIONS: tuple[Migration, ...] = rendered("sqlite", (
    Migration(1, "turns with full-text index", core.TURNS + TURNS_FTS),
    Migration(2, "memories with full-text index", core.MEMORIES + MEMORIES_FTS),
    Migration(3, "meta and fencing tokens", core.META),
    Migration(4, "turns indexed with neighbours and date", turn_context_sql(_FTS_TOKENIZER)),
    Migration(5, "full-text words prefixed by tenant", tenant_index_sql(_FTS_TOKENIZER)),
    Migration(10, "layer state, receipts and failures",
              layers.LAYER_STATE + evidence.RECEIPTS + LAYER_FAILURES),
    Migration(11, "scene and profile versions", layers.SCENES_PROFILE),
    Migration(12, "failure records of every LLM stage: quarantines, splits, drops",
              FAILURES + FAILURES_FROM_LAYER_FAILURES),
    layers.backlog_migration(SESSION_HEADS_TRIGGERS + TENANTS_WITH_MEMORIES),
    *SHARED,
))  # fmt: skip


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
