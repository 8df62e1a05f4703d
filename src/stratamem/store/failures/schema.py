"""The failure records of every LLM stage, on both databases (DDL written once:
`store/migration.py`): quarantined turns, failed stages, rejected batches, dropped items.
"""

from __future__ import annotations

from stratamem.store.migration import Migration

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

#: One open record per condition (`rows.insert_failures`): a stage failing again for the same
#: reason updates the open record of that condition (attempts, last seen, latest raw replies)
#: instead of adding one; records written before it have no key and stay as they are. And the
#: automatic retries of open records: when the next is due (`retry_at`, NULL: none, it waits
#: for an operator) and how many ran (`auto_retries`). (Version 15 was taken by the receipts.)
PER_CONDITION = Migration(14, "failure records: one per condition, automatic retries", """
ALTER TABLE failures ADD COLUMN condition_key TEXT NOT NULL DEFAULT '';
ALTER TABLE failures ADD COLUMN last_seen_at {float};
ALTER TABLE failures ADD COLUMN retry_at {float};
ALTER TABLE failures ADD COLUMN auto_retries INTEGER NOT NULL DEFAULT 0;
CREATE INDEX failures_by_condition ON failures (tenant, stage, condition_key, status);
CREATE INDEX failures_retry_due ON failures (retry_at) WHERE retry_at IS NOT NULL;
""")
