"""Context offload's tables, on both databases (DDL written once: `store/migration.py`): tool
pairs as received, their entries (summary, score, ref), the exact results behind refs, the
user messages that may bound a task (marks), each session's routing state, and the tasks with
their diagrams.
"""

from __future__ import annotations

from stratamem.store.migration import Migration

OFFLOAD = Migration(20, "context offload: tool pairs, entries, refs, boundaries, tasks", """
CREATE TABLE offload_pairs (
    rid {rid},
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    params TEXT NOT NULL,
    result TEXT,
    error TEXT,
    ts {float} NOT NULL,
    duration_ms {float},
    received_at {float} NOT NULL,
    claim_id TEXT,
    claim_expires {float},
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
    ts {float} NOT NULL,
    result_chars INTEGER NOT NULL,
    mode TEXT NOT NULL,
    task_id TEXT,
    node_id TEXT,
    created_at {float} NOT NULL,
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
    created_at {float} NOT NULL,
    PRIMARY KEY (tenant, ref_id)
);
CREATE TABLE offload_marks (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    mark_id TEXT NOT NULL,
    ts {float} NOT NULL,
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
    last_mark_ts {float},
    updated_at {float} NOT NULL,
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
    created_at {float} NOT NULL,
    updated_at {float} NOT NULL,
    PRIMARY KEY (tenant, session, task_id)
);
""")  # fmt: skip

#: What the backlog scheduler looks for (`store/backlog.py`): pending pairs, unjudged marks,
#: entries routed to a task but not mapped to a diagram node.
OFFLOAD_BACKLOG = Migration(21, "backlog: indexes of owed offload work", """
CREATE INDEX offload_pairs_owed ON offload_pairs (tenant, session, received_at) WHERE done = 0;
CREATE INDEX offload_marks_unjudged ON offload_marks (tenant, session, ts) WHERE judged = 0;
CREATE INDEX offload_entries_unmapped ON offload_entries (tenant, session, created_at)
    WHERE task_id IS NOT NULL AND node_id IS NULL;
""")  # fmt: skip
