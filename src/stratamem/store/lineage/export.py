"""A tenant's whole memory as versioned JSONL, and loading it into any store
(`stratamem export`, `stratamem import-export`, `GET /v1/export`).

The first line is a header: `{"format": "stratamem-export", "version": 1, "tenant", "store",
"embedding"}` (`store`: `sqlite` or `postgres`; `embedding`: the model and width of the
exporting store's vectors, or null). Every other line is one row: `{"table", "row"}`, tables in
the order below and rows in the order they were written, so an import writes them in the same
order (memories keep their order, which the layers read). Ids, sequence numbers, validity and
versions are kept; vectors are not exported: the importing store embeds the records again with
its own model. Row numbers are the store's own and never exported: the layers' mark (memories
consolidated into scenes) is written as a count of memories.

An export of the same data is the same whichever store holds it, but for `store`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from stratamem.domain import Role, Scope, Turn
from stratamem.errors import InvalidInput
from stratamem.store.core.rows import MEMORY_COLUMNS, memory_from_row
from stratamem.store.core.store import SqlCoreStore

FORMAT = "stratamem-export"
VERSION = 1


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[str, ...]
    order: str


_TURNS = Table("turns", ("id", "session", "seq", "role", "speaker", "text", "ts", "metadata"),
               "rid")  # fmt: skip
_MEMORIES = Table("memories", tuple(c.strip() for c in MEMORY_COLUMNS.split(",")), "rid")
#: Copied row for row (their columns are the same on both databases).
_PLAIN = (
    Table("layer_sessions", ("session", "cursor_seq", "l1_runs", "last_l1_at", "last_l2_at"),
          "session"),
    Table("scene_versions", ("id", "version", "title", "summary", "body", "heat", "memory_ids",
                             "created_at", "updated_at", "deleted", "mode", "current"),
          "id, version"),
    Table("profile_versions", ("version", "body", "updated_at", "mode", "current"), "version"),
    Table("lineage", ("kind", "id", "version", "source_kind", "source_id", "source_version"),
          "kind, id, version, source_kind, source_id, source_version"),
    Table("lineage_stale", ("kind", "id", "reason", "marked_at"), "kind, id"),
    Table("offload_pairs", ("session", "call_id", "tool", "params", "result", "error", "ts",
                            "duration_ms", "received_at", "done"), "rid"),
    Table("offload_entries", ("session", "call_id", "tool", "summary", "score", "ref_id", "ts",
                              "result_chars", "mode", "task_id", "node_id", "created_at"),
          "session, call_id"),
    Table("offload_refs", ("ref_id", "session", "call_id", "tool", "content", "created_at"),
          "ref_id"),
    Table("offload_marks", ("session", "mark_id", "ts", "text", "task_id", "judged"),
          "session, mark_id"),
    Table("offload_boundaries", ("session", "version", "active_task", "last_mark_ts",
                                 "updated_at"), "session"),
    Table("offload_tasks", ("session", "task_id", "label", "status", "long_task", "mermaid",
                            "version", "created_at", "updated_at"), "session, task_id"),
)  # fmt: skip
_TENANT_STATE = ("consolidated", "memories_since_l3", "last_l2_at", "last_l3_at")


def export_tenant(store: SqlCoreStore, scope: Scope, store_kind: str) -> Iterator[dict[str, Any]]:
    """The tenant's export, line by line (as JSON objects)."""
    info = store.embedding_info()
    yield {
        "format": FORMAT,
        "version": VERSION,
        "tenant": scope.tenant,
        "store": store_kind,
        "embedding": None if info is None else {"model": info.model, "dim": info.dim},
    }
    with store.reading() as conn:
        for table in (_TURNS, _MEMORIES, *_PLAIN):
            rows = conn.execute(
                f"SELECT {', '.join(table.columns)} FROM {table.name} WHERE tenant = ?"
                f" ORDER BY {table.order}",
                (scope.tenant,),
            ).fetchall()
            for row in rows:
                values = [row[i] for i in range(len(table.columns))]
                yield {"table": table.name, "row": dict(zip(table.columns, values, strict=True))}
        state = conn.execute(
            "SELECT (SELECT count(*) FROM memories m WHERE m.tenant = t.tenant"
            " AND m.rid <= t.l2_mark), memories_since_l3, last_l2_at, last_l3_at"
            " FROM layer_tenants t WHERE tenant = ?",
            (scope.tenant,),
        ).fetchone()
    if state is not None:
        values = [state[i] for i in range(len(_TENANT_STATE))]
        yield {"table": "layer_tenants", "row": dict(zip(_TENANT_STATE, values, strict=True))}


def import_tenant(
    store: SqlCoreStore, lines: Iterable[dict[str, Any]], tenant: str | None = None
) -> dict[str, int]:
    """Load an export into `store`, under its own tenant or `tenant`; the tenant must hold no
    turns or memories yet. Counts of rows written by table."""
    items = iter(lines)
    header = next(items, None)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidInput(f"not a {FORMAT} file: its first line is no header")
    if header.get("version") != VERSION:
        raise InvalidInput(f"export version {header.get('version')!r}: this reads {VERSION}")
    scope = Scope(tenant or str(header["tenant"]))
    _check_empty(store, scope)
    rows: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        rows.setdefault(str(item["table"]), []).append(dict(item["row"]))
    counts = {"turns": store.import_turns(scope, [_turn(scope, r) for r in rows.pop("turns", [])])}
    memories = [memory_from_row({**r, "tenant": scope.tenant}) for r in rows.pop("memories", [])]
    store.upsert_memories(scope, memories)
    counts["memories"] = len(memories)
    state = rows.pop("layer_tenants", [])
    with store.writing(key=scope.tenant) as conn:
        for table in _PLAIN:
            found = rows.pop(table.name, [])
            columns = ("tenant", *table.columns)
            marks = ", ".join("?" for _ in columns)
            conn.executemany(
                f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({marks})",
                [(scope.tenant, *(r[c] for c in table.columns)) for r in found],
            )
            counts[table.name] = len(found)
        for row in state:
            _tenant_state(conn, scope.tenant, row)
    if rows:
        raise InvalidInput(f"the export names tables this does not know: {sorted(rows)}")
    return counts


def _check_empty(store: SqlCoreStore, scope: Scope) -> None:
    with store.reading() as conn:
        held = conn.execute(
            "SELECT (SELECT count(*) FROM turns WHERE tenant = ?)"
            " + (SELECT count(*) FROM memories WHERE tenant = ?)",
            (scope.tenant, scope.tenant),
        ).fetchone()
    if int(held[0]):
        raise InvalidInput(f"tenant {scope.tenant!r} holds data here already: import into an"
                           " empty tenant (or erase it first)")  # fmt: skip


def _turn(scope: Scope, row: dict[str, Any]) -> Turn:
    return Turn(id=row["id"], tenant=scope.tenant, session=row["session"], role=Role(row["role"]),
                text=row["text"], timestamp=row["ts"], speaker=row["speaker"],
                metadata=json.loads(row["metadata"]), seq=int(row["seq"]))  # fmt: skip


def _tenant_state(conn: Any, tenant: str, row: dict[str, Any]) -> None:
    consolidated = int(row["consolidated"])
    mark = 0
    if consolidated:
        found = conn.execute(
            "SELECT rid FROM memories WHERE tenant = ? ORDER BY rid LIMIT 1 OFFSET ?",
            (tenant, consolidated - 1),
        ).fetchone()
        mark = int(found[0])
    conn.execute("INSERT INTO layer_tenants (tenant) VALUES (?) ON CONFLICT DO NOTHING", (tenant,))
    conn.execute(
        "UPDATE layer_tenants SET l2_mark = ?, memories_since_l3 = ?, last_l2_at = ?,"
        " last_l3_at = ? WHERE tenant = ?",
        (mark, row["memories_since_l3"], row["last_l2_at"], row["last_l3_at"], tenant),
    )
