"""Schema of the memory layers (migration versions 10-19): state, receipts, scenes, profile,
and the failure records of every LLM stage (`failures`, which context offload writes too).

Memory versions need no table of their own: an update inserts a new row and closes the old one
(`valid_to`, `superseded_by`) in `memories`.
"""

from __future__ import annotations

from stratamem.store.migration import Migration
from stratamem.store.sqlite.backlog_schema import BACKLOG_LAYER_MIGRATION

M010_LAYER_STATE = """
CREATE TABLE layer_sessions (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    l1_runs INTEGER NOT NULL DEFAULT 0,
    last_l1_at REAL,
    last_l2_at REAL,
    PRIMARY KEY (tenant, session)
);
CREATE TABLE layer_tenants (
    tenant TEXT PRIMARY KEY,
    l2_mark INTEGER NOT NULL DEFAULT 0,
    memories_since_l3 INTEGER NOT NULL DEFAULT 0,
    last_l2_at REAL,
    last_l3_at REAL
);
CREATE TABLE layer_receipts (
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    completed_at REAL NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (tenant, task_id)
);
CREATE TABLE layer_failures (
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

M011_SCENES_PROFILE = """
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
CREATE INDEX scene_versions_current ON scene_versions (tenant, current);
CREATE TABLE profile_versions (
    tenant TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    updated_at REAL NOT NULL,
    mode TEXT NOT NULL,
    current INTEGER NOT NULL,
    PRIMARY KEY (tenant, version)
);
"""

M012_FAILURES = """
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
    resolved_at REAL,
    UNIQUE (tenant, id)
);
CREATE INDEX failures_by_tenant ON failures (tenant, rid);
CREATE INDEX failures_open ON failures (tenant, stage, status, session);
INSERT INTO failures (tenant, id, kind, status, stage, session, task_id, error, raws, failed_at)
SELECT tenant, 'f_' || lower(hex(randomblob(12))), 'stage', 'open', stage, session, task_id,
       error, raws, failed_at
FROM layer_failures ORDER BY rid;
DROP TABLE layer_failures;
"""

# Receipts of every task type, authenticated: who ran it (attempt JSON), its outcome, and an
# HMAC by a key of `receipt_keys` (rows from before have no MAC: they never verify).
M015_RECEIPTS = """
ALTER TABLE layer_receipts ADD COLUMN outcome TEXT NOT NULL DEFAULT 'completed';
ALTER TABLE layer_receipts ADD COLUMN attempt TEXT;
ALTER TABLE layer_receipts ADD COLUMN key_id TEXT;
ALTER TABLE layer_receipts ADD COLUMN mac TEXT;
CREATE TABLE receipt_keys (
    id TEXT PRIMARY KEY,
    secret BLOB NOT NULL,
    created_at REAL NOT NULL,
    retired_at REAL
);
"""

# The execution log of pipeline tasks (`store/executions.py`): one row per execution, its window
# and what ended it; the open rows of a task or lock key are found by the start of the next.
M017_EXECUTIONS = """
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
CREATE INDEX executions_open ON executions (tenant, lock_key)
    WHERE ended_at IS NULL AND fenced_at IS NULL;
"""

# Retention of the execution log and receipts (`store/log_retention.py`) pages through the rows
# past it in the order they ended: these indexes make a page cost what it returns.
M018_LOG_RETENTION = """
CREATE INDEX executions_ended ON executions (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX layer_receipts_completed ON layer_receipts (completed_at, tenant, task_id);
"""

LAYER_MIGRATIONS: tuple[Migration, ...] = (
    Migration(10, "layer state, receipts and failures", M010_LAYER_STATE),
    Migration(11, "scene and profile versions", M011_SCENES_PROFILE),
    Migration(12, "failure records of every LLM stage: quarantines, splits, drops", M012_FAILURES),
    BACKLOG_LAYER_MIGRATION,
    Migration(15, "authenticated receipts of every task type, and their keys", M015_RECEIPTS),
    Migration(17, "the execution log of pipeline tasks", M017_EXECUTIONS),
    Migration(18, "retention: executions and receipts by age", M018_LOG_RETENTION),
)
