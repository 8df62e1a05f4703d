"""The PostgreSQL store's vectors as pgvector rows, one per piece (`store/pieces.py`).

A record's vectors stay one float32 blob in its own row (what `stratamem migrate` copies, what
"pending embedding" means); `catch_up` decodes the blobs written since a tenant's mark (their
`emb_seq`) into `turn_vectors` / `memory_vectors` rows, each stamped with the `emb_seq` it came
from. A search joins a vector to its record only when both carry the same `emb_seq`, so a vector
of changed, re-embedded or erased content is never matched, even before it is replaced or gone
(erasing a record deletes its vectors in the same transaction: `ON DELETE CASCADE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stratamem.domain import Layer
from stratamem.store.postgres.connection import PgConn

RECORD_TABLES = {Layer.L0: "turns", Layer.L1: "memories"}
VECTOR_TABLES = {Layer.L0: "turn_vectors", Layer.L1: "memory_vectors"}
BATCH_ROWS = 2000


def vector_text(vector: np.ndarray) -> str:
    """pgvector's text form of a float32 vector, exact (each value as its shortest float64
    repr, which reads back to the same float32)."""
    return "[" + ",".join(map(repr, vector.astype(np.float32).tolist())) + "]"


_BEHIND = (
    "COALESCE((SELECT max(emb_seq) FROM {records} WHERE tenant = ?), 0)"
    " > COALESCE((SELECT seq FROM vector_marks WHERE tenant = ? AND layer = ?), 0)"
)


def behind(conn: PgConn, tenant: str, layer: Layer) -> bool:
    """Whether the tenant has vectors written since its rows were last decoded."""
    row = conn.execute(
        "SELECT " + _BEHIND.format(records=RECORD_TABLES[layer]), (tenant, tenant, layer.value)
    ).fetchone()
    return bool(row[0])


@dataclass(frozen=True)
class SearchState:
    """What a vector search must know first, read in one query: whether the tenant has
    vectors not yet decoded (`behind`), the dimension and pieces per record of its own index
    (None, 0 without one), and the embedding generation (a new model starts again at 1)."""

    behind: bool
    index_dim: int | None
    pieces: float
    generation: str


def ask_search_state(conn: PgConn, tenant: str, layer: Layer) -> Any:
    """The query of the tenant's `SearchState` (a cursor, read by `search_state_of`)."""
    return conn.execute(
        f"SELECT {_BEHIND.format(records=RECORD_TABLES[layer])}, i.dim, i.pieces_per_record,"
        " (SELECT value FROM meta WHERE key = 'emb_generation')"
        " FROM (SELECT 1) one LEFT JOIN vector_indexes i ON i.tenant = ? AND i.layer = ?",
        (tenant, tenant, layer.value, tenant, layer.value),
    )


def search_state_of(cursor: Any) -> SearchState:
    row = cursor.fetchone()
    return SearchState(bool(row[0]), None if row[1] is None else int(row[1]),
                       float(row[2] or 0.0), str(row[3] or "0"))  # fmt: skip


def search_state(conn: PgConn, tenant: str, layer: Layer) -> SearchState:
    return search_state_of(ask_search_state(conn, tenant, layer))


def catch_up_batch(conn: PgConn, tenant: str, layer: Layer, dim: int) -> int:
    """Decode up to `BATCH_ROWS` blobs past the tenant's mark (inside the caller's transaction,
    which holds the tenant's vector lock); returns how many records were read."""
    mark_row = conn.execute(
        "SELECT seq FROM vector_marks WHERE tenant = ? AND layer = ?", (tenant, layer.value)
    ).fetchone()
    mark = 0 if mark_row is None else int(mark_row[0])
    rows = conn.execute(
        f"SELECT rid, embedding, emb_seq FROM {RECORD_TABLES[layer]}"
        " WHERE tenant = ? AND emb_seq > ? ORDER BY emb_seq LIMIT ?",
        (tenant, mark, BATCH_ROWS),
    ).fetchall()
    if not rows:
        return 0
    table = VECTOR_TABLES[layer]
    conn.execute(f"DELETE FROM {table} WHERE rid = ANY(?)", ([int(r[0]) for r in rows],))
    write_pieces(conn, table, tenant, rows, dim)
    conn.execute(
        "INSERT INTO vector_marks (tenant, layer, seq) VALUES (?, ?, ?)"
        " ON CONFLICT (tenant, layer) DO UPDATE SET seq = excluded.seq",
        (tenant, layer.value, max(int(r[2]) for r in rows)),
    )
    return len(rows)


def write_pieces(conn: PgConn, table: str, tenant: str, rows: list[Any], dim: int) -> int:
    """COPY the pieces of each (rid, blob, emb_seq) row; a blob that is not whole vectors of
    `dim` (written under another model: `reindex` replaces it) gives none."""
    written = 0
    with conn.raw.cursor().copy(
        f"COPY {table} (rid, piece, tenant, seq, embedding) FROM STDIN".encode()
    ) as copy:
        for rid, blob, seq in rows:
            flat = np.frombuffer(blob, dtype=np.float32)
            if flat.shape[0] == 0 or flat.shape[0] % dim:
                continue
            for piece, vector in enumerate(flat.reshape(-1, dim)):
                copy.write_row((rid, piece, tenant, seq, vector_text(vector)))
                written += 1
    return written


def forget_all(conn: PgConn) -> None:
    """Every decoded vector and mark (the model changed: everything is embedded again)."""
    for table in VECTOR_TABLES.values():
        conn.execute(f"DELETE FROM {table}")
    conn.execute("DELETE FROM vector_marks")
