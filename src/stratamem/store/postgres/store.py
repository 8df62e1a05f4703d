"""`PostgresStore`: the system of record on PostgreSQL (psycopg 3 and its connection pool).

Many processes may open the same database: every write is one transaction, and the writes of
one tenant are serialised by an advisory lock on the tenant (so a cursor check, a fence check or
a sequence number read inside a write holds until it commits). Retrieval ranks as the SQLite
store does: BM25 from the tenant's own text statistics (`text_search.py`), vectors scanned per
tenant (`store/vector_search.py`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from stratamem.domain import Hit, Layer, MemoryRecord, Scope, Turn
from stratamem.errors import EmbeddingMismatch, MemoryChanged, NotFound, StoreError
from stratamem.store import fencing_sql, vector_search
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
from stratamem.store.postgres import erase, text_index, text_search
from stratamem.store.postgres.connection import PgConn, PgPool
from stratamem.store.postgres.migrations import migrate
from stratamem.store.postgres.tokens import Tokenizer
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
from stratamem.store.vectors import VectorCache

_TABLES = vector_search.TABLES
#: The advisory lock key of vector writes: `emb_seq` values then commit in increasing order.
_EMBEDDING_KEY = "embeddings"
_MEMORY_UPDATES = ", ".join(
    f"{c.strip()} = excluded.{c.strip()}" for c in MEMORY_WRITE_COLUMNS.split(",")[2:]
)


class PostgresStore:
    """The `Store` contract on PostgreSQL; safe to share across threads and processes."""

    def __init__(self, url: str, pool_size: int = 16) -> None:
        self.url = url
        self._pool = PgPool(url, pool_size)
        try:
            with self._pool.pool.connection() as conn:
                migrate(conn)
        except BaseException:
            self._pool.close()
            raise
        self._tokenizer = Tokenizer()
        self._lock = threading.Lock()
        self._caches: dict[tuple[str, Layer], VectorCache] = {}

    def close(self) -> None:
        self._pool.close()
        self._tokenizer.close()

    @contextmanager
    def reading(self) -> Iterator[PgConn]:
        with self._pool.reading() as conn:
            yield conn

    @contextmanager
    def writing(self, fence: Fence | None = None, key: str | None = None) -> Iterator[PgConn]:
        """One transaction; under `key`'s advisory lock (a tenant) and, with a `fence`, refused
        unless its token is the newest."""
        with self._pool.writing(() if key is None else (key,)) as conn:
            if fence is not None:
                fencing_sql.check_and_record(conn, fence)
            yield conn

    # -- embedding model ---------------------------------------------------------------------
    def embedding_info(self) -> EmbeddingInfo | None:
        with self.reading() as conn:
            raw = _meta(conn, "embedding")
        if raw is None:
            return None
        data = json.loads(raw)
        return EmbeddingInfo(model=data["model"], dim=int(data["dim"]))

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        wanted = {"model": info.model, "dim": info.dim}
        with self.writing(key=_EMBEDDING_KEY) as conn:
            raw = _meta(conn, "embedding")
            if raw is None:
                _set_meta(conn, "embedding", json.dumps(wanted))
                return
        stored = json.loads(raw)
        if stored != wanted:
            raise EmbeddingMismatch(
                f"this store was indexed with {stored['model']} (dimension {stored['dim']}),"
                f" not {info.model} (dimension {info.dim}): run `stratamem reindex` to"
                " re-embed everything with the configured model, or configure the old one"
            )

    def reset_embeddings(self, info: EmbeddingInfo | None) -> int:
        with self.writing(key=_EMBEDDING_KEY) as conn:
            dropped = 0
            for table in _TABLES.values():
                dropped += conn.execute(
                    f"UPDATE {table} SET embedding = NULL, emb_seq = NULL"
                    " WHERE embedding IS NOT NULL"
                ).rowcount
            if info is None:
                conn.execute("DELETE FROM meta WHERE key = 'embedding'")
            else:
                _set_meta(conn, "embedding", json.dumps({"model": info.model, "dim": info.dim}))
            generation = int(_meta(conn, "emb_generation") or 0) + 1
            _set_meta(conn, "emb_generation", str(generation))
        with self._lock:
            self._caches.clear()
        return dropped

    def pending_embeddings(self, layer: Layer, limit: int) -> list[PendingText]:
        table = _TABLES[layer]
        text_col = "text, speaker" if layer is Layer.L0 else "content AS text, NULL AS speaker"
        with self.reading() as conn:
            tenants = conn.execute(
                f"SELECT DISTINCT tenant FROM {table} WHERE embedding IS NULL"
            ).fetchall()
            queues = [
                conn.execute(
                    f"SELECT tenant, id, {text_col} FROM {table}"
                    " WHERE tenant = ? AND embedding IS NULL ORDER BY rid LIMIT ?",
                    (str(t[0]), limit),
                ).fetchall()
                for t in tenants
            ]
        return [
            PendingText(
                layer,
                r["tenant"],
                r["id"],
                embedding_text(layer, r["text"], r["speaker"]),
                embedding_pieces(layer, r["text"], r["speaker"]),
            )
            for r in fair_share(queues, limit)
        ]

    def count_pending_embeddings(self, scope: Scope) -> int:
        with self.reading() as conn:
            return sum(
                int(conn.execute(
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
        with self.writing(key=_EMBEDDING_KEY) as conn:
            conn.executemany(
                f"UPDATE {_TABLES[layer]} SET embedding = ?, emb_seq = nextval('emb_seq')"
                " WHERE tenant = ? AND id = ?",
                [(blobs[i], tenant, rec_id) for i, (tenant, rec_id) in enumerate(items)],
            )

    # -- L0 turns ----------------------------------------------------------------------------
    def add_turns(self, scope: Scope, turns: Sequence[Turn]) -> list[Turn]:
        stored: list[Turn] = []
        with self.writing(key=scope.tenant) as conn:
            next_seq: dict[str, int] = {}
            for turn in turns:
                seq = next_seq.get(turn.session) or _max_seq(conn, scope.tenant, turn.session) + 1
                if not _insert_turn(conn, scope.tenant, turn, seq):
                    continue
                next_seq[turn.session] = seq + 1
                stored.append(_with_seq(turn, scope.tenant, seq))
            _mark_previous(conn, scope.tenant, stored)
        if stored:
            self._catch_up(scope.tenant, Layer.L0)
        return stored

    def get_turns(self, scope: Scope, ids: Sequence[str]) -> list[Turn]:
        if not ids:
            return []
        with self.reading() as conn:
            rows = conn.execute(
                f"SELECT {TURN_COLUMNS} FROM turns WHERE tenant = ? AND id = ANY(?)",
                (scope.tenant, list(ids)),
            ).fetchall()
        by_id = {row["id"]: turn_from_row(row) for row in rows}
        return [by_id[i] for i in ids if i in by_id]

    def list_turns(
        self, scope: Scope, session: str, after_seq: int = 0, limit: int = 100
    ) -> list[Turn]:
        with self.reading() as conn:
            rows = conn.execute(
                f"SELECT {TURN_COLUMNS} FROM turns WHERE tenant = ? AND session = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (scope.tenant, session, after_seq, limit),
            ).fetchall()
        return [turn_from_row(row) for row in rows]

    def list_sessions(self, scope: Scope) -> list[str]:
        with self.reading() as conn:
            rows = conn.execute(
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
        marks = ", ".join("?" for _ in MEMORY_WRITE_COLUMNS.split(","))
        with self.writing(fence, key=scope.tenant) as conn:
            _check_current(conn, scope.tenant, expect_current)
            conn.executemany(
                f"INSERT INTO memories ({MEMORY_WRITE_COLUMNS}) VALUES ({marks})"
                f" ON CONFLICT (tenant, id) DO UPDATE SET {_MEMORY_UPDATES},"
                " embedding = CASE WHEN memories.content = excluded.content"
                " THEN memories.embedding ELSE NULL END,"
                " emb_seq = CASE WHEN memories.content = excluded.content"
                " THEN memories.emb_seq ELSE NULL END,"
                " fts_dirty = memories.fts_dirty OR memories.content <> excluded.content",
                [memory_params(m) for m in memories],
            )
        if memories:
            self._catch_up(scope.tenant, Layer.L1)

    def get_memory(self, scope: Scope, memory_id: str) -> MemoryRecord:
        with self.reading() as conn:
            row = conn.execute(
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
        with self.reading() as conn:
            rows = conn.execute(
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
        self._catch_up(scope.tenant, layer)
        keys = text_search.query_keys(self._tokenizer, scope.tenant, query, phrases)
        with self.reading() as conn:
            if max_share is not None:
                rows, _ = text_search.totals(conn, scope.tenant, layer)
                cap = max(text_search.COMMON_FLOOR_ROWS, int(rows * max_share))
                keys = text_search.discriminative(conn, scope.tenant, layer, keys, cap)
            return text_search.ranked(conn, scope.tenant, layer, keys, filters, limit, fields)

    def search_vector(
        self, scope: Scope, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
    ) -> list[Candidate]:
        with self.reading() as conn:
            generation = _meta(conn, "emb_generation") or "0"
            with self._lock:
                cache = self._cache(scope.tenant, layer, int(vector.shape[0]), generation)
                vector_search.refresh_cache(conn, cache, scope.tenant, layer)
                return vector_search.search_vector(
                    conn, cache, scope.tenant, layer, vector, filters, limit
                )

    def _cache(self, tenant: str, layer: Layer, dim: int, generation: str) -> VectorCache:
        cache = self._caches.get((tenant, layer))
        if cache is None or cache.generation != generation or cache.dim != dim:
            cache = VectorCache(dim=dim, generation=generation)
            self._caches[(tenant, layer)] = cache
        return cache

    def index_text(self, tenant: str, layer: Layer) -> None:
        """Index the tenant's rows of `layer` written since its text index last looked (done
        before each search anyway; a bulk copy calls it to pay for it at once)."""
        self._catch_up(tenant, layer)

    def _catch_up(self, tenant: str, layer: Layer) -> None:
        """Index the tenant's rows written since its text index last looked."""
        with self.reading() as conn:
            if not text_index.has_dirty(conn, tenant, layer):
                return
        while True:
            with self.writing(key=tenant) as conn:
                done = text_index.index_batch(conn, self._tokenizer, tenant, layer)
            if done < text_index.BATCH_ROWS:
                return

    def load_hits(self, scope: Scope, layer: Layer, ids: Sequence[str]) -> dict[str, Hit]:
        if layer is Layer.L0:
            return {t.id: hit_from_turn(t) for t in self.get_turns(scope, ids)}
        if not ids:
            return {}
        with self.reading() as conn:
            rows = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE tenant = ? AND id = ANY(?)",
                (scope.tenant, list(ids)),
            ).fetchall()
        return {row["id"]: hit_from_memory(memory_from_row(row)) for row in rows}

    # -- fencing, erasing, statistics --------------------------------------------------------
    def newest_fence(self, key: str) -> int:
        with self.reading() as conn:
            return fencing_sql.newest(conn, key)

    def erase_session(self, scope: Scope, session: str) -> dict[str, int]:
        with self.writing(key=scope.tenant) as conn:
            return erase.erase_session(conn, scope.tenant, session)

    def erase_tenant(self, scope: Scope) -> dict[str, int]:
        with self.writing(key=scope.tenant) as conn:
            counts = erase.erase_tenant(conn, scope.tenant)
        with self._lock:
            for layer in (Layer.L0, Layer.L1):
                self._caches.pop((scope.tenant, layer), None)
        return counts

    def stats(self, scope: Scope | None = None) -> dict[str, Any]:
        where, params = ("WHERE tenant = ?", [scope.tenant]) if scope else ("", [])
        info = self.embedding_info()
        result: dict[str, Any] = {
            "embedding_model": info.model if info else None,
            "embedding_dim": info.dim if info else None,
        }
        with self.reading() as conn:
            for layer, table in _TABLES.items():
                row = conn.execute(
                    f"SELECT COUNT(*), COUNT(embedding) FROM {table} {where}", params
                ).fetchone()
                result[layer.value] = {"records": row[0], "pending_embeddings": row[0] - row[1]}
            row = conn.execute(
                f"SELECT COUNT(DISTINCT tenant), COUNT(DISTINCT session) FROM turns {where}",
                params,
            ).fetchone()
        result["tenants"], result["sessions"] = row[0], row[1]
        return result


def _meta(conn: PgConn, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _set_meta(conn: PgConn, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def _max_seq(conn: PgConn, tenant: str, session: str) -> int:
    row = conn.execute(
        "SELECT MAX(seq) FROM turns WHERE tenant = ? AND session = ?", (tenant, session)
    ).fetchone()
    return int(row[0] or 0)


def _insert_turn(conn: PgConn, tenant: str, turn: Turn, seq: int) -> bool:
    cursor = conn.execute(
        "INSERT INTO turns (tenant, id, session, seq, role, speaker, text, ts, metadata,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, id) DO NOTHING",
        (tenant, turn.id, turn.session, seq, turn.role.value, turn.speaker, turn.text,
         turn.timestamp, json.dumps(turn.metadata, ensure_ascii=False), turn.timestamp),
    )  # fmt: skip
    return cursor.rowcount > 0


def _mark_previous(conn: PgConn, tenant: str, stored: Sequence[Turn]) -> None:
    """A new turn is its predecessor's next neighbour: that one is indexed again."""
    conn.executemany(
        "UPDATE turns SET fts_dirty = TRUE WHERE tenant = ? AND session = ? AND seq = ?",
        [(tenant, turn.session, (turn.seq or 0) - 1) for turn in stored],
    )


def _check_current(conn: PgConn, tenant: str, memory_ids: Sequence[str]) -> None:
    for memory_id in memory_ids:
        row = conn.execute(
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
