"""`SqlCoreStore`: the `Store` contract on a SQL database (SQLite or PostgreSQL, `sql.py`).

Turns, memories, embeddings bookkeeping, vector search, hits, fencing and statistics are the same
SQL on both databases, and so is every public method here; a database's subclass lends its
connection (`reading()`, `writing()`) and supplies only what truly differs:
- full-text search (`_search_text`) and its index's upkeep: a turn row's own columns
  (`_turn_extra`), what follows new turns and writes (`_turns_added`, `_after_write`:
  PostgreSQL's text index catches up; SQLite's triggers already did);
- vectors: how they are sequenced and written (`_write_vectors`), what follows
  (`_vectors_written`, `_embeddings_reset`), and PostgreSQL's own `search_vector` (pgvector);
- erasing (`erase_session`, `erase_tenant`; what goes is `store/erasure.py`).
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import numpy as np

from stratamem.domain import Hit, Layer, MemoryRecord, Scope, Turn
from stratamem.errors import EmbeddingMismatch, MemoryChanged, NotFound, StoreError
from stratamem.store import erasure, fencing
from stratamem.store.core import vector_search
from stratamem.store.core.filters import filter_sql
from stratamem.store.core.pieces import embedding_pieces, embedding_text, fair_share, vector_blobs
from stratamem.store.core.port import (
    NO_FILTERS,
    Candidate,
    EmbeddingInfo,
    Fence,
    Filters,
    PendingText,
    TurnFieldWeights,
)
from stratamem.store.core.rows import (
    HIT_COLUMNS,
    MEMORY_COLUMNS,
    MEMORY_WRITE_COLUMNS,
    TURN_COLUMNS,
    memory_from_row,
    memory_params,
    turn_from_row,
)
from stratamem.store.core.text_query import TextQuery
from stratamem.store.core.vectors import VectorCaches
from stratamem.store.sql import SqlConn

TABLES = vector_search.TABLES
#: The lock key of the writes that bind, reset or sequence vectors (PostgreSQL serialises them
#: under it; SQLite serialises every write anyway).
EMBEDDING_KEY = "embeddings"
_MEMORY_MARKS = ", ".join("?" for _ in MEMORY_WRITE_COLUMNS.split(","))
_MEMORY_UPSERT = (
    f"INSERT INTO memories ({MEMORY_WRITE_COLUMNS}) VALUES ({_MEMORY_MARKS})"
    " ON CONFLICT (tenant, id) DO UPDATE SET "
    + ", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in MEMORY_WRITE_COLUMNS.split(",")[2:])
    + ", embedding = CASE WHEN memories.content = excluded.content"
    " THEN memories.embedding ELSE NULL END,"
    " emb_seq = CASE WHEN memories.content = excluded.content"
    " THEN memories.emb_seq ELSE NULL END"
)


class SqlCoreStore(ABC):
    """The shared part of `SqliteStore` and `PostgresStore`; safe to share across threads."""

    #: What a backend adds to the memory upsert's `DO UPDATE SET` (its own bookkeeping columns).
    MEMORY_UPSERT_EXTRA = ""
    #: Whether searches gain from running side by side (see `Store.searches_in_parallel`).
    searches_in_parallel = False

    def __init__(self) -> None:
        self._caches = VectorCaches()
        self._cache_lock = threading.Lock()

    # -- what a backend supplies -------------------------------------------------------------
    @abstractmethod
    def reading(self) -> AbstractContextManager[SqlConn]:
        """The connection, for reads."""

    @abstractmethod
    def writing(
        self, fence: Fence | None = None, key: str | None = None
    ) -> AbstractContextManager[SqlConn]:
        """One write transaction (see `sql.SqlStore.writing`)."""

    @abstractmethod
    def _search_text(self, tenant: str, layer: Layer, query: TextQuery) -> list[Candidate]:
        """BM25 candidates of the tenant's rows of `layer`, best first (`search_text`)."""

    @abstractmethod
    def _write_vectors(
        self, conn: Any, layer: Layer, items: Sequence[tuple[str, str]], blobs: Sequence[bytes]
    ) -> None:
        """Set each item's vectors (`blobs[i]`) and a new `emb_seq`, inside the transaction
        that holds the embeddings' lock (`store_embeddings`)."""

    def _vectors_written(  # noqa: B027 - a hook: nothing to do unless a backend says so
        self, layer: Layer, tenants: Sequence[str], dim: int
    ) -> None:
        """Called after `store_embeddings` committed vectors of `tenants`."""

    def _turn_extra(self, tenant: str) -> dict[str, Any]:
        """A backend's own columns of a turn row, with their values."""
        return {}

    def _turn_writing(self, tenant: str, sessions: Sequence[str]) -> AbstractContextManager[Any]:
        """The transaction that captures turns of `sessions`: it must keep each session's
        sequence numbers in order (the tenant's lock does)."""
        return self.writing(key=tenant)

    def _turns_added(  # noqa: B027 - a hook, as above
        self, conn: Any, tenant: str, stored: Sequence[Turn], rids: Mapping[str, int]
    ) -> None:
        """Bookkeeping of new turns (their row ids by turn id in `rids`), inside their
        transaction."""

    def _after_write(self, tenant: str, layer: Layer) -> None:  # noqa: B027 - a hook, as above
        """Called after a committed write of the tenant's rows of `layer`."""

    def _embeddings_reset(self, conn: Any) -> None:  # noqa: B027 - a hook, as above
        """What else goes with every vector, inside `reset_embeddings`'s transaction."""

    def import_turns(self, scope: Scope, turns: Sequence[Turn]) -> int:
        """Turns as an export holds them (`store/lineage/export.py`): each keeps its own
        sequence number; a turn whose id the tenant has already is left as it is. How many
        were written."""
        stored: list[Turn] = []
        rids: dict[str, int] = {}
        with self._turn_writing(scope.tenant, [t.session for t in turns]) as conn:
            for turn in turns:
                extra = self._turn_extra(scope.tenant)
                written = _insert_turn(conn, scope.tenant, turn, turn.seq, extra)
                if written is not None:
                    rids[turn.id] = written[1]
                    stored.append(replace(turn, tenant=scope.tenant))
            self._turns_added(conn, scope.tenant, stored, rids)
        if stored:
            self._after_write(scope.tenant, Layer.L0)
        return len(stored)

    # -- forgetting (`store/lineage/store.py`) ----------------------------------------------
    def forgetting(self, tenant: str) -> AbstractContextManager[SqlConn]:
        """The write transaction of a forget under the tenant's key (SQLite: its freed pages
        overwritten, its full-text index merged and its log checkpointed after)."""
        return self.writing(key=tenant)

    def delete_records(self, conn: Any, tenant: str, layer: Layer, ids: Sequence[str]) -> int:
        """Delete the tenant's rows `ids` of `layer` (turns or memories) in the caller's
        transaction, their index entries with them; how many went."""
        deleted = 0
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            deleted += conn.execute(
                f"DELETE FROM {TABLES[layer]} WHERE tenant = ? AND id IN ({_marks(chunk)})",
                (tenant, *chunk),
            ).rowcount
        return deleted

    def forgotten(self, tenant: str) -> None:
        """Called after a forget committed: nothing cached of the tenant's rows is served."""
        self._forget_caches(tenant)

    # -- embedding model ---------------------------------------------------------------------
    def embedding_info(self) -> EmbeddingInfo | None:
        with self.reading() as conn:
            raw = meta(conn, "embedding")
        if raw is None:
            return None
        data = json.loads(raw)
        return EmbeddingInfo(model=data["model"], dim=int(data["dim"]))

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        wanted = {"model": info.model, "dim": info.dim}
        with self.reading() as conn:
            raw = meta(conn, "embedding")
        if raw is None:
            with self.writing(key=EMBEDDING_KEY) as conn:
                raw = meta(conn, "embedding")  # another process may have bound it since
                if raw is None:
                    set_meta(conn, "embedding", json.dumps(wanted))
                    return
        stored = json.loads(raw)
        if stored != wanted:
            raise EmbeddingMismatch(
                f"this store was indexed with {stored['model']} (dimension {stored['dim']}),"
                f" not {info.model} (dimension {info.dim}): run `stratamem reindex` to"
                " re-embed everything with the configured model, or configure the old one"
            )

    def reset_embeddings(self, info: EmbeddingInfo | None) -> int:
        with self.writing(key=EMBEDDING_KEY) as conn:
            dropped = 0
            for table in TABLES.values():
                dropped += conn.execute(
                    f"UPDATE {table} SET embedding = NULL, emb_seq = NULL"
                    " WHERE embedding IS NOT NULL"
                ).rowcount
            if info is None:
                conn.execute("DELETE FROM meta WHERE key = 'embedding'")
            else:
                set_meta(conn, "embedding", json.dumps({"model": info.model, "dim": info.dim}))
            next_counter(conn, "emb_generation")
            self._embeddings_reset(conn)
        with self._cache_lock:
            self._caches.clear()
        return dropped

    def pending_embeddings(
        self, layer: Layer, limit: int, tenant: str | None = None
    ) -> list[PendingText]:
        table = TABLES[layer]
        text_col = "text, speaker" if layer is Layer.L0 else "content AS text, NULL AS speaker"
        with self.reading() as conn:
            tenants = [(tenant,)] if tenant is not None else conn.execute(
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

    def store_embeddings(
        self,
        layer: Layer,
        items: Sequence[tuple[str, str]],
        vectors: np.ndarray,
        counts: Sequence[int] | None = None,
    ) -> None:
        blobs = vector_blobs(len(items), vectors, counts)
        with self.writing(key=EMBEDDING_KEY) as conn:
            self._write_vectors(conn, layer, items, blobs)
        if items:
            self._vectors_written(layer, sorted({t for t, _ in items}), int(vectors.shape[1]))

    def count_pending_embeddings(self, scope: Scope) -> int:
        with self.reading() as conn:
            return sum(
                int(conn.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE tenant = ? AND embedding IS NULL",
                    (scope.tenant,),
                ).fetchone()[0])
                for table in TABLES.values()
            )  # fmt: skip

    # -- L0 turns ----------------------------------------------------------------------------
    def add_turns(self, scope: Scope, turns: Sequence[Turn]) -> list[Turn]:
        stored: list[Turn] = []
        rids: dict[str, int] = {}
        with self._turn_writing(scope.tenant, [t.session for t in turns]) as conn:
            next_seq: dict[str, int] = {}
            for turn in turns:
                extra = self._turn_extra(scope.tenant)
                written = _insert_turn(conn, scope.tenant, turn, next_seq.get(turn.session), extra)
                if written is None:
                    continue
                seq, rids[turn.id] = written
                next_seq[turn.session] = seq + 1
                stored.append(replace(turn, tenant=scope.tenant, seq=seq))
            self._turns_added(conn, scope.tenant, stored, rids)
        if stored:
            self._after_write(scope.tenant, Layer.L0)
        return stored

    def get_turns(self, scope: Scope, ids: Sequence[str]) -> list[Turn]:
        if not ids:
            return []
        with self.reading() as conn:
            rows = conn.execute(
                f"SELECT {TURN_COLUMNS} FROM turns WHERE tenant = ? AND id IN ({_marks(ids)})",
                [scope.tenant, *ids],
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

    def sessions_with_data(self, scope: Scope) -> list[str]:
        with self.reading() as conn:
            return erasure.tenant_sessions(conn, scope.tenant)

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
        with self.writing(fence, key=scope.tenant) as conn:
            _check_current(conn, scope.tenant, expect_current)
            conn.executemany(
                _MEMORY_UPSERT + self.MEMORY_UPSERT_EXTRA, [memory_params(m) for m in memories]
            )
        if memories:
            self._after_write(scope.tenant, Layer.L1)

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

    # -- retrieval (full-text search is each backend's own) ----------------------------------
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
        max_rows: int | None = None,
    ) -> list[Candidate]:
        asked = TextQuery(query, filters, limit, max_share, phrases, fields, max_rows)
        return self._search_text(scope.tenant, layer, asked)

    def search_vector(
        self, scope: Scope, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
    ) -> list[Candidate]:
        with self.reading() as conn:
            generation = meta(conn, "emb_generation") or "0"
            return self._search_cached(conn, generation, None, scope.tenant, layer, vector,
                                       filters, limit)  # fmt: skip

    def _search_cached(
        self, conn: Any, generation: str, fresh: vector_search.NewVectors | None, tenant: str,
        layer: Layer, vector: np.ndarray, filters: Filters, limit: int,
    ) -> list[Candidate]:  # fmt: skip
        """The scan of the tenant's cached vectors, the cache first brought up to date: with
        `fresh`, the rows read for it beside another question, when it is the cache they were
        asked for, as it was then (another search may have refreshed it meanwhile, or a new
        model replaced it); else by reading them now."""
        with self._cache_lock:
            cache = self._caches.get(tenant, layer, int(vector.shape[0]), generation)
            if fresh is not None and fresh.cache is cache and cache.max_seq == fresh.since:
                vector_search.add_new_vectors(cache, fresh.rows)
            else:
                vector_search.refresh_cache(conn, cache, tenant, layer)
            self._caches.settle()
            return vector_search.search_vector(conn, cache, tenant, layer, vector, filters, limit)

    def _forget_caches(self, tenant: str) -> None:
        with self._cache_lock:
            self._caches.forget(tenant)

    def load_hits(self, scope: Scope, layer: Layer, ids: Sequence[str]) -> dict[str, Hit]:
        """Only the columns a hit shows, made into hits at once (not whole turns and memories
        first, their metadata decoded): a search loads a pool of them, twice."""
        if not ids:
            return {}
        columns, table, to_hit = HIT_COLUMNS[layer]
        with self.reading() as conn:
            rows = conn.execute(
                f"SELECT {columns} FROM {table} WHERE tenant = ? AND id IN ({_marks(ids)})",
                [scope.tenant, *ids],
            ).fetchall()
        return {row["id"]: to_hit(row) for row in rows}

    # -- fencing and statistics --------------------------------------------------------------
    def newest_fence(self, key: str) -> int:
        with self.reading() as conn:
            return fencing.newest(conn, key)

    def stats(self, scope: Scope | None = None) -> dict[str, Any]:
        where, params = ("WHERE tenant = ?", [scope.tenant]) if scope else ("", [])
        info = self.embedding_info()
        result: dict[str, Any] = {
            "embedding_model": info.model if info else None,
            "embedding_dim": info.dim if info else None,
        }
        with self.reading() as conn:
            for layer, table in TABLES.items():
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


# -- meta ------------------------------------------------------------------------------------
def meta(conn: SqlConn, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: SqlConn, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def next_counter(conn: SqlConn, key: str, by: int = 1) -> int:
    """Raise a counter kept in `meta` by `by` (inside the caller's write); its new value."""
    value = int(meta(conn, key) or 0) + by
    set_meta(conn, key, str(value))
    return value


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


_TURN_COLUMNS = "tenant, id, session, seq, role, speaker, text, ts, metadata, created_at"
#: The session's next sequence number, unless the caller knows it (the first turn of a batch).
_NEXT_SEQ = (
    "COALESCE(CAST(? AS INTEGER),"
    " (SELECT MAX(seq) FROM turns WHERE tenant = ? AND session = ?) + 1, 1)"
)


def _insert_turn(
    conn: SqlConn, tenant: str, turn: Turn, seq: int | None, extra: dict[str, Any]
) -> tuple[int, int] | None:
    """Write one turn (one statement) unless the tenant has its id already; its sequence number
    and row id (None when it was there already)."""
    marks = "".join(", ?" for _ in extra)
    rows = conn.execute(
        f"INSERT INTO turns ({_TURN_COLUMNS}{''.join(f', {c}' for c in extra)})"
        f" VALUES (?, ?, ?, {_NEXT_SEQ}, ?, ?, ?, ?, ?, ?{marks})"
        " ON CONFLICT (tenant, id) DO NOTHING RETURNING seq, rid",
        (tenant, turn.id, turn.session, seq, tenant, turn.session, turn.role.value, turn.speaker,
         turn.text, turn.timestamp, json.dumps(turn.metadata, ensure_ascii=False),
         turn.timestamp, *extra.values()),
    ).fetchall()  # fmt: skip
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def _check_current(conn: SqlConn, tenant: str, memory_ids: Sequence[str]) -> None:
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
