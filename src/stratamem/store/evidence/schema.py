"""The pipeline's evidence both databases hold (DDL written once: `store/migration.py`): the
completion receipts of every task type and the keys that sign them, and the execution log.
"""

from __future__ import annotations

from stratamem.store.migration import Migration

#: Part of migration 10 (with the layers' state): a task's receipt, written with its effects.
RECEIPTS = """
CREATE TABLE layer_receipts (
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    completed_at {float} NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (tenant, task_id)
);
"""

# Receipts of every task type, authenticated: who ran it (attempt JSON), its outcome, and an
# HMAC by a key of `receipt_keys` (rows from before have no MAC: they never verify).
AUTHENTICATED_RECEIPTS = Migration(
    15, "authenticated receipts of every task type, and their keys", """
ALTER TABLE layer_receipts ADD COLUMN outcome TEXT NOT NULL DEFAULT 'completed';
ALTER TABLE layer_receipts ADD COLUMN attempt TEXT;
ALTER TABLE layer_receipts ADD COLUMN key_id TEXT;
ALTER TABLE layer_receipts ADD COLUMN mac TEXT;
CREATE TABLE receipt_keys (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,  -- postgres only: SQLite's rowid is unnamed
    id TEXT PRIMARY KEY,
    secret {bytes} NOT NULL,
    created_at {float} NOT NULL,
    retired_at {float}
);
""")  # fmt: skip

# The execution log of pipeline tasks (`evidence/executions.py`): one row per execution, its
# window and what ended it; the open rows of a task or lock key are found by the start of the
# next.
EXECUTIONS = Migration(17, "the execution log of pipeline tasks", """
CREATE TABLE executions (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,  -- postgres only: SQLite's rowid is unnamed
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    delivery INTEGER NOT NULL,
    token {bigint},
    worker TEXT NOT NULL,
    started_at {float} NOT NULL,
    type TEXT NOT NULL,
    session TEXT,
    lock_key TEXT,
    committed_at {float},
    ended_at {float},
    outcome TEXT,
    fenced_at {float}
);
CREATE INDEX executions_by_task ON executions (tenant, task_id);
CREATE INDEX executions_open ON executions (tenant, lock_key)
    WHERE ended_at IS NULL AND fenced_at IS NULL;
""")  # fmt: skip

# Retention of the execution log and receipts (`evidence/retention.py`) pages through the rows
# past it in the order they ended: these indexes make a page cost what it returns (ended at,
# then rowid: on SQLite every index ends in the rowid anyway).
LOG_RETENTION = Migration(18, "retention: executions and receipts by age", """
CREATE INDEX executions_ended ON executions (ended_at) WHERE ended_at IS NOT NULL;  -- sqlite only
CREATE INDEX executions_ended ON executions (ended_at, rowid)  -- postgres only
    WHERE ended_at IS NOT NULL;  -- postgres only
CREATE INDEX layer_receipts_completed ON layer_receipts (completed_at, tenant, task_id);
""")  # fmt: skip
