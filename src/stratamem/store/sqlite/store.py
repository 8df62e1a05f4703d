"""`SqliteStore`: the embedded system of record (one file, WAL, FTS5, exact vector scan)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.domain import Hit, Layer, MemoryRecord, Scope, Turn
from stratamem.errors import EmbeddingMismatch, MemoryChanged, NotFound, StoreError
from stratamem.store import fencing_sql as fencing
from stratamem.store import vector_search
from stratamem.store.base import (
    NO_FILTERS,
    Candidate,
    EmbeddingInfo,
    Fence,
    Filters,
    PendingText,
    TurnFieldWeights,
)
from stratamem.store.filters_sql import filter_sql
from stratamem.store.pieces import embedding_pieces, embedding_text, fair_share, vector_blobs
from stratamem.store.rows import (
    MEMORY_COLUMNS,
    MEMORY_WRITE_COLUMNS,
    TURN_COLUMNS,
    hit_from_memory,
    hit_from_turn,
    memory_from_row,
    memory_params,
    turn_from_row,
)
from stratamem.store.scope_tokens import tenant_token
from stratamem.store.sqlite import erase, retrieval
from stratamem.store.sqlite.connection import connect, write_transaction
from stratamem.store.sqlite.migrations import migrate
from stratamem.store.vectors import VectorCache

_TABLES = retrieval.TABLES
_SIZE_TTL_S = 30.0


class SqliteStore:
    """The `Store` contract on one SQLite file. Safe to share across threads and processes."""

    def __init__(self, path: Path, synchronous: str = "NORMAL") -> None:
        self.path = path
        self._conn = connect(path, synchronous)
        self._lock = threading.RLock()
        self._caches: dict[tuple[str, Layer], VectorCache] = {}
        self._sizes: dict[tuple[str, Layer], tuple[int, float]] = {}
        with self._lock:
            migrate(self._conn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, for reads by the store's extensions (layers, offload)."""
        with self._lock:
            yield self._conn

    @contextmanager
    def writing(
        self, fence: Fence | None = None, key: str | None = None
    ) -> Iterator[sqlite3.Connection]:
        """One short write transaction; with a `fence`, refused unless its token is the newest.
        Every write transaction of the file is serialised, whatever its `key`."""
        with self._lock, write_transaction(self._conn):
            if fence is not None:
                fencing.check_and_record(self._conn, fence)
            yield self._conn

    # -- embedding model ---------------------------------------------------------------------
    def embedding_info(self) -> EmbeddingInfo | None:
        with self._lock:
            raw = self._meta("embedding")
        if raw is None:
            return None
        data = json.loads(raw)
        return EmbeddingInfo(model=data["model"], dim=int(data["dim"]))

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        wanted = {"model": info.model, "dim": info.dim}
        with self._lock:
            raw = self._meta("embedding")
            if raw is None:
                with write_transaction(self._conn):
                    raw = self._meta("embedding")  # another process may have bound it since
                    if raw is None:
                        self._set_meta("embedding", json.dumps(wanted))
                        return
        stored = json.loads(raw)
        if stored != wanted:
            raise EmbeddingMismatch(
                f"this store was indexed with {stored['model']} (dimension {stored['dim']}),"
                f" not {info.model} (dimension {info.dim}): run `stratamem reindex` to"
                " re-embed everything with the configured model, or configure the old one"
            )

    def reset_embeddings(self, info: EmbeddingInfo | None) -> int:
        with self._lock, write_transaction(self._conn):
            dropped = 0
            for table in _TABLES.values():
                cursor = self._conn.execute(
                    f"UPDATE {table} SET embedding = NULL, emb_seq = NULL"
                    " WHERE embedding IS NOT NULL"
                )
                dropped += cursor.rowcount
            payload = None if info is None else {"model": info.model, "dim": info.dim}
            if payload is None:
                self._conn.execute("DELETE FROM meta WHERE key = 'embedding'")
            else:
                self._set_meta("embedding", json.dumps(payload))
            self._set_meta("emb_generation", str(self._next_counter("emb_generation")))
            self._caches.clear()
        return dropped

    def pending_embeddings(self, layer: Layer, limit: int) -> list[PendingText]:
        table = _TABLES[layer]
        text_col = "text, speaker" if layer is Layer.L0 else "content AS text, NULL AS speaker"
        with self._lock:
            tenants = [
                str(r[0]) for r in self._conn.execute(
                    f"SELECT DISTINCT tenant FROM {table} WHERE embedding IS NULL"
                )
            ]  # fmt: skip
            queues = [
                self._conn.execute(
                    f"SELECT tenant, id, {text_col} FROM {table}"
                    " WHERE tenant = ? AND embedding IS NULL ORDER BY rid LIMIT ?",
                    (tenant, limit),
                ).fetchall()
                for tenant in tenants
            ]
        rows = fair_share(queues, limit)
        return [
            PendingText(
                layer,
                r["tenant"],
                r["id"],
                embedding_text(layer, r["text"], r["speaker"]),
                embedding_pieces(layer, r["text"], r["speaker"]),
            )
            for r in rows
        ]

    def count_pending_embeddings(self, scope: Scope) -> int:
        with self._lock:
            return sum(
                int(self._conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE tenant = ? AND embedding IS NULL",
                    (scope.tenant,),
                ).fetchone()[0])
                for table in _TABLES.values()
            )  # fmt: skip

    def store_embeddings(
        self,
        layer: Layer,
        items: Sequence[tuple[str, str]],
        vectors: np.ndarray,
        counts: Sequence[int] | None = None,
    ) -> None:
        blobs = vector_blobs(len(items), vectors, counts)
        table = _TABLES[layer]
        with self._lock, write_transaction(self._conn):
            seq = self._next_counter("emb_seq", by=len(items))
            start = seq - len(items) + 1
            self._conn.executemany(
                f"UPDATE {table} SET embedding = ?, emb_seq = ? WHERE tenant = ? AND id = ?",
                [
                    (blobs[i], start + i, tenant, rec_id)
                    for i, (tenant, rec_id) in enumerate(items)
                ],
            )

    # -- L0 turns ----------------------------------------------------------------------------
    def add_turns(self, scope: Scope, turns: Sequence[Turn]) -> list[Turn]:
        stored: list[Turn] = []
        with self._lock, write_transaction(self._conn):
            next_seq: dict[str, int] = {}
            for turn in turns:
                if self._turn_exists(scope.tenant, turn.id):
                    continue
                seq = next_seq.get(turn.session) or self._max_seq(scope.tenant, turn.session) + 1
                next_seq[turn.session] = seq + 1
                self._insert_turn(scope.tenant, turn, seq)
                stored.append(_with_seq(turn, scope.tenant, seq))
        return stored

    def _turn_exists(self, tenant: str, turn_id: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM turns WHERE tenant = ? AND id = ?", (tenant, turn_id)
        ).fetchone()
        return row is not None

    def _max_seq(self, tenant: str, session: str) -> int:
        row = self._conn.execute(
            "SELECT MAX(seq) FROM turns WHERE tenant = ? AND session = ?", (tenant, session)
        ).fetchone()
        return int(row[0] or 0)

    def _insert_turn(self, tenant: str, turn: Turn, seq: int) -> None:
        self._conn.execute(
            "INSERT INTO turns (tenant, id, session, seq, role, speaker, text, ts, metadata,"
            " created_at, scope_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                tenant,
                turn.id,
                turn.session,
                seq,
                turn.role.value,
                turn.speaker,
                turn.text,
                turn.timestamp,
                json.dumps(turn.metadata, ensure_ascii=False),
                turn.timestamp,
                tenant_token(tenant),
            ),
        )

    def get_turns(self, scope: Scope, ids: Sequence[str]) -> list[Turn]:
        if not ids:
            return []
        marks = ", ".join("?" for _ in ids)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {TURN_COLUMNS} FROM turns WHERE tenant = ? AND id IN ({marks})",
                [scope.tenant, *ids],
            ).fetchall()
        by_id = {row["id"]: turn_from_row(row) for row in rows}
        return [by_id[i] for i in ids if i in by_id]

    def list_turns(
        self, scope: Scope, session: str, after_seq: int = 0, limit: int = 100
    ) -> list[Turn]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {TURN_COLUMNS} FROM turns WHERE tenant = ? AND session = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (scope.tenant, session, after_seq, limit),
            ).fetchall()
        return [turn_from_row(row) for row in rows]

    def list_sessions(self, scope: Scope) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT session, MIN(ts) AS first FROM turns WHERE tenant = ?"
                " GROUP BY session ORDER BY first, session",
                (scope.tenant,),
            ).fetchall()
        return [row[0] for row in rows]

    # -- L1 memories -------------------------------------------------------------------------
    def upsert_memories(
        self,
        scope: Scope,
        memories: Sequence[MemoryRecord],
        fence: Fence | None = None,
        expect_current: Sequence[str] = (),
    ) -> None:
        for memory in memories:
            if memory.tenant != scope.tenant:
                raise StoreError(f"memory {memory.id!r} belongs to another tenant than the scope")
        columns = MEMORY_WRITE_COLUMNS
        marks = ", ".join("?" for _ in columns.split(","))
        updates = ", ".join(
            f"{c.strip()} = excluded.{c.strip()}" for c in columns.split(",")[2:]
        )
        with self.writing(fence):
            self._check_current(scope.tenant, expect_current)
            self._conn.executemany(
                f"INSERT INTO memories ({columns}) VALUES ({marks})"
                f" ON CONFLICT (tenant, id) DO UPDATE SET {updates},"
                " embedding = CASE WHEN memories.content = excluded.content"
                " THEN memories.embedding ELSE NULL END,"
                " emb_seq = CASE WHEN memories.content = excluded.content"
                " THEN memories.emb_seq ELSE NULL END",
                [memory_params(m) for m in memories],
            )

    def _check_current(self, tenant: str, memory_ids: Sequence[str]) -> None:
        for memory_id in memory_ids:
            row = self._conn.execute(
                "SELECT valid_to, superseded_by FROM memories WHERE tenant = ? AND id = ?",
                (tenant, memory_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"no memory {memory_id!r} in tenant {tenant!r}")
            if row["superseded_by"] is not None or row["valid_to"] is not None:
                raise MemoryChanged(
                    f"memory {memory_id!r} was superseded or forgotten meanwhile"
                    f" (superseded by {row['superseded_by']!r}); nothing was written"
                )

    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND id = ?",
                (scope.tenant, memory_id),
            ).fetchone()
        if row is None:
            raise NotFound(f"no memory {memory_id!r} in tenant {scope.tenant!r}")
        return memory_from_row(row)

    def list_memories(
        self, scope: Scope, filters: Filters = NO_FILTERS, limit: int = 100, offset: int = 0
    ) -> list[MemoryRecord]:
        tail, params = filter_sql(Layer.L1, filters, "r")
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories r WHERE r.tenant = ?{tail}"
                " ORDER BY r.valid_from DESC, r.rid DESC LIMIT ? OFFSET ?",
                [scope.tenant, *params, limit, offset],
            ).fetchall()
        return [memory_from_row(row) for row in rows]

    # -- retrieval ---------------------------------------------------------------------------
    def search_text(
        self,
        scope: Scope,
        layer: Layer,
        query: str,
        filters: Filters,
        limit: int,
        max_share: float | None = None,
        phrases: bool = True,
        fields: TurnFieldWeights | None = None,
    ) -> list[Candidate]:
        with self._lock:
            try:
                return retrieval.search_text(
                    self._conn,
                    scope.tenant,
                    layer,
                    query,
                    filters,
                    limit,
                    self._tenant_rows(scope.tenant, layer),
                    max_share,
                    phrases,
                    fields,
                )
            except sqlite3.OperationalError as exc:
                raise StoreError(f"full-text search failed: {exc}") from exc

    def search_vector(
        self, scope: Scope, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
    ) -> list[Candidate]:
        with self._lock:
            cache = self._cache(scope.tenant, layer, int(vector.shape[0]))
            vector_search.refresh_cache(self._conn, cache, scope.tenant, layer)
            return vector_search.search_vector(
                self._conn, cache, scope.tenant, layer, vector, filters, limit
            )

    def _tenant_rows(self, tenant: str, layer: Layer) -> int:
        """Rows the tenant has in a layer, re-counted at most every `_SIZE_TTL_S` seconds.

        Only steers the choice of a query plan, never a result, so a stale count is harmless.
        """
        key = (tenant, layer)
        cached = self._sizes.get(key)
        if cached is not None and time.monotonic() - cached[1] < _SIZE_TTL_S:
            return cached[0]
        row = self._conn.execute(
            f"SELECT count(*) FROM {_TABLES[layer]} WHERE tenant = ?", (tenant,)
        ).fetchone()
        self._sizes[key] = (int(row[0]), time.monotonic())
        return int(row[0])

    def _cache(self, tenant: str, layer: Layer, dim: int) -> VectorCache:
        generation = self._meta("emb_generation") or "0"
        cache = self._caches.get((tenant, layer))
        if cache is None or cache.generation != generation or cache.dim != dim:
            cache = VectorCache(dim=dim, generation=generation)
            self._caches[(tenant, layer)] = cache
        return cache

    def load_hits(self, scope: Scope, layer: Layer, ids: Sequence[str]) -> dict[str, Hit]:
        if layer is Layer.L0:
            return {t.id: hit_from_turn(t) for t in self.get_turns(scope, ids)}
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND id IN ({marks})",
                [scope.tenant, *ids],
            ).fetchall()
        return {row["id"]: hit_from_memory(memory_from_row(row)) for row in rows}

    # -- fencing and statistics --------------------------------------------------------------
    def newest_fence(self, key: str) -> int:
        with self._lock:
            return fencing.newest(self._conn, key)

    # -- erasing -----------------------------------------------------------------------------
    def erase_session(self, scope: Scope, session: str) -> dict[str, int]:
        with self._secure_delete(), self.writing() as conn:
            counts = erase.erase_session(conn, scope.tenant, session)
        self._sizes.clear()
        return counts

    def erase_tenant(self, scope: Scope) -> dict[str, int]:
        with self._secure_delete(), self.writing() as conn:
            counts = erase.erase_tenant(conn, scope.tenant)
        self._sizes.clear()
        for layer in (Layer.L0, Layer.L1):
            self._caches.pop((scope.tenant, layer), None)
        return counts

    @contextmanager
    def _secure_delete(self) -> Iterator[None]:
        """Overwrite freed pages while erasing, so deleted text does not linger in the file."""
        with self._lock:
            self._conn.execute("PRAGMA secure_delete = ON")
            try:
                yield
            finally:
                self._conn.execute("PRAGMA secure_delete = OFF")

    def stats(self, scope: Scope | None = None) -> dict[str, Any]:
        where, params = ("WHERE tenant = ?", [scope.tenant]) if scope else ("", [])
        info = self.embedding_info()
        result: dict[str, Any] = {
            "embedding_model": info.model if info else None,
            "embedding_dim": info.dim if info else None,
        }
        with self._lock:
            for layer, table in _TABLES.items():
                row = self._conn.execute(
                    f"SELECT COUNT(*), COUNT(embedding) FROM {table} {where}", params
                ).fetchone()
                result[layer.value] = {"records": row[0], "pending_embeddings": row[0] - row[1]}
            row = self._conn.execute(
                f"SELECT COUNT(DISTINCT tenant), COUNT(DISTINCT session) FROM turns {where}",
                params,
            ).fetchone()
        result["tenants"], result["sessions"] = row[0], row[1]
        return result

    # -- meta --------------------------------------------------------------------------------
    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def _next_counter(self, key: str, by: int = 1) -> int:
        value = int(self._meta(key) or 0) + by
        self._set_meta(key, str(value))
        return value


def _with_seq(turn: Turn, tenant: str, seq: int) -> Turn:
    return Turn(
        id=turn.id,
        tenant=tenant,
        session=turn.session,
        role=turn.role,
        text=turn.text,
        timestamp=turn.timestamp,
        speaker=turn.speaker,
        metadata=turn.metadata,
        seq=seq,
    )
