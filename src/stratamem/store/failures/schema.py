"""The failure records of every LLM stage, on both databases (DDL written once:
`store/migration.py`): quarantined turns, failed stages, rejected batches, dropped items.
"""

from __future__ import annotations

FAILURES = """
CREATE TABLE failures (
    rid {rid},
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
    failed_at {float} NOT NULL,
    resolved_at {float},
    UNIQUE (tenant, id)
);
CREATE INDEX failures_by_tenant ON failures (tenant, rid);
CREATE INDEX failures_open ON failures (tenant, stage, status, session);
"""
