"""The lineage table both databases hold (DDL written once: `store/migration.py`).

A memory's sources are in its own row already: the turns it came from (`source_turn_ids`) and
the memories it consumed (theirs `superseded_by` names it). What the layers build on memories
is recorded here, one row per (derived record, source): a scene version's memories, a profile
version's memories and the scene versions it was written from. `version` and `source_version`
are 0 where a record has none (a memory).

Migration 40 fills it for what was built before: a scene version from its `memory_ids`; a
profile version, which never named its sources, from every memory written before it (so a
forgotten memory purges every old profile version that may repeat it).
"""

from __future__ import annotations

from stratamem.store.migration import Migration

#: A scene version's memories, from the JSON list each database reads its own way (one line,
#: as `render` keeps or drops a line by its mark).
_SCENES_FROM = (
    "INSERT INTO lineage (tenant, kind, id, version, source_kind, source_id)"
    " SELECT s.tenant, 'scene', s.id, s.version, 'memory', j.value"
    " FROM scene_versions s, {each} WHERE true ON CONFLICT DO NOTHING;"
)
LINEAGE = (
    """
CREATE TABLE lineage (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    source_kind TEXT NOT NULL,
    source_id TEXT NOT NULL,
    source_version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, kind, id, version, source_kind, source_id, source_version)
);
CREATE INDEX lineage_by_source ON lineage (tenant, source_kind, source_id);
"""
    + _SCENES_FROM.format(each="json_each(s.memory_ids) j")
    + "  -- sqlite only: its JSON functions\n"
    + _SCENES_FROM.format(each="jsonb_array_elements_text(s.memory_ids::jsonb) j(value)")
    + "  -- postgres only: its JSON functions\n"
    + """INSERT INTO lineage (tenant, kind, id, version, source_kind, source_id)
SELECT p.tenant, 'profile', '', p.version, 'memory', m.id
FROM profile_versions p JOIN memories m ON m.tenant = p.tenant AND m.created_at <= p.updated_at
WHERE true ON CONFLICT DO NOTHING;
"""
)

#: Scene and profile versions built from a memory that was corrected or superseded (`reason`
#: `corrected`) or whose validity ended (`forgotten`): the scheduler has them rebuilt
#: (`layers/backlog.py`); recall's stable block leaves out what is stale as forgotten.
STALE = """
CREATE TABLE lineage_stale (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    reason TEXT NOT NULL,
    marked_at {float} NOT NULL,
    PRIMARY KEY (tenant, kind, id)
);
"""
STALE_MIGRATION = Migration(41, "lineage: scenes and profiles to rebuild after a correction",
                            STALE)  # fmt: skip

LINEAGE_MIGRATION = Migration(40, "lineage: what scene and profile versions were built from",
                              LINEAGE)  # fmt: skip
