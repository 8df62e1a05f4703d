"""Schema the backlog scheduler's store queries need (layers 13, offload 21).

- `session_heads`: per session, its newest turn (`last_seq`, `last_turn_at`) and a copy of the
  layers' cursor, kept by triggers on `turns` and `layer_sessions`; its partial index holds only
  the sessions owing L1, so a page of them costs what it returns, not a scan of every session.
- `layer_flush_requests`: flush requests accepted and not completed yet (one per session).
- A row in `layer_tenants` for every tenant with a memory (trigger), and indexes to find tenants
  with memories past their L2 mark and scenes newer than their last L3.
- Partial indexes over the offload rows that are owed work: pending pairs, unjudged boundaries,
  entries routed to a task but not mapped to a diagram node.
"""

from __future__ import annotations

from stratamem.store.migration import Migration

M013_BACKLOG = """
CREATE TABLE session_heads (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_turn_at REAL NOT NULL,
    cursor_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session)
);
CREATE INDEX session_heads_owed ON session_heads (tenant, session) WHERE last_seq > cursor_seq;
INSERT INTO session_heads (tenant, session, last_seq, last_turn_at, cursor_seq)
SELECT t.tenant, t.session, MAX(t.seq), MAX(t.ts), COALESCE(MAX(s.cursor_seq), 0)
FROM turns t LEFT JOIN layer_sessions s ON s.tenant = t.tenant AND s.session = t.session
GROUP BY t.tenant, t.session;
CREATE TRIGGER session_heads_turn AFTER INSERT ON turns BEGIN
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
CREATE TABLE layer_flush_requests (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    requested_at REAL NOT NULL,
    PRIMARY KEY (tenant, session)
);
INSERT OR IGNORE INTO layer_tenants (tenant) SELECT DISTINCT tenant FROM memories;
CREATE TRIGGER layer_tenants_memory AFTER INSERT ON memories BEGIN
    INSERT OR IGNORE INTO layer_tenants (tenant) VALUES (new.tenant);
END;
CREATE INDEX memories_by_tenant_rid ON memories (tenant, rid);
CREATE INDEX scene_versions_by_time ON scene_versions (tenant, created_at);
"""

M021_OFFLOAD_BACKLOG = """
CREATE INDEX offload_pairs_owed ON offload_pairs (tenant, session, received_at) WHERE done = 0;
CREATE INDEX offload_marks_unjudged ON offload_marks (tenant, session, ts) WHERE judged = 0;
CREATE INDEX offload_entries_unmapped ON offload_entries (tenant, session, created_at)
    WHERE task_id IS NOT NULL AND node_id IS NULL;
"""

BACKLOG_LAYER_MIGRATION = Migration(
    13, "backlog: session heads, flush requests, tenants with memories", M013_BACKLOG
)
BACKLOG_OFFLOAD_MIGRATION = Migration(21, "backlog: indexes of owed offload work",
                                      M021_OFFLOAD_BACKLOG)  # fmt: skip
