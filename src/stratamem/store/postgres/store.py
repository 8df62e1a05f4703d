"""`PostgresStore`: the system of record on PostgreSQL (psycopg 3 and its connection pool).

Many processes may open the same database: every write is one transaction, and the writes of
one tenant are serialised by an advisory lock on the tenant (so a cursor check, a fence check or
a sequence number read inside a write holds until it commits), except captures: those of one
session are serialised by the session's lock, and hold the tenant's lock shared, so captures of
a tenant's sessions run side by side but never beside another write of the tenant.

Everything but what truly differs is `SqlCoreStore` (`store/core/store.py`); here are the
pool, the text index that follows each write and BM25 from the tenant's own text statistics
(`text_index.py`, `text_search.py`), vectors sequenced by a database sequence and searched on
pgvector, exact within the tenant or through the tenant's own HNSW index (`vectors.py`), and
erasing (which also lowers the text statistics).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from stratamem.domain import Layer, Scope, Turn
from stratamem.store import fencing
from stratamem.store.core import vector_search as vector_search_core
from stratamem.store.core.port import Candidate, Fence, Filters
from stratamem.store.core.store import TABLES, SqlCoreStore
from stratamem.store.core.text_query import TextQuery
from stratamem.store.core.vectors import VectorCaches
from stratamem.store.postgres import capture_index, erase, text_index, text_search, vector_rows
from stratamem.store.postgres.connection import PgConn, PgPool, session_key
from stratamem.store.postgres.migrations import migrate
from stratamem.store.postgres.tokens import Tokenizer
from stratamem.store.postgres.vectors import PgVectors


class PostgresStore(SqlCoreStore):
    """The `Store` contract on PostgreSQL; safe to share across threads and processes."""

    searches_in_parallel = True  # each list is a query of its own connection

    #: A memory whose content changed is indexed again.
    MEMORY_UPSERT_EXTRA = ", fts_dirty = memories.fts_dirty OR memories.content <> excluded.content"

    def __init__(
        self, url: str, pool_size: int = 16, ann_min_vectors: int | None = None,
        background_builds: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.url = url
        self._pool = PgPool(url, pool_size)
        try:
            with self._pool.pool.connection() as conn:
                migrate(conn)
        except BaseException:
            self._pool.close()
            raise
        self._tokenizer = Tokenizer()
        self.vectors = PgVectors(self, ann_min_vectors, background_builds)
        # Below the index threshold a tenant's cached vectors are scanned exactly, as the
        # exact search in SQL did (numpy: ~1 ms for 10,000 384-d vectors).
        self._caches = VectorCaches(exact_max=self.vectors.ann_min_vectors)

    def close(self) -> None:
        self.vectors.close()
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
                fencing.check_and_record(conn, fence)
            yield conn

    def _write_vectors(
        self, conn: Any, layer: Layer, items: Sequence[tuple[str, str]], blobs: Sequence[bytes]
    ) -> None:
        conn.executemany(
            f"UPDATE {TABLES[layer]} SET embedding = ?, emb_seq = nextval('emb_seq')"
            " WHERE tenant = ? AND id = ?",
            [(blobs[i], tenant, rec_id) for i, (tenant, rec_id) in enumerate(items)],
        )

    def _vectors_written(self, layer: Layer, tenants: Sequence[str], dim: int) -> None:
        for tenant in tenants:
            self.vectors.catch_up(tenant, layer, dim)

    def _embeddings_reset(self, conn: PgConn) -> None:
        self.vectors.forget_all(conn)

    def search_vector(
        self, scope: Scope, layer: Layer, vector: np.ndarray, filters: Filters, limit: int
    ) -> list[Candidate]:
        """Through the tenant's own HNSW index when it has one; else the core's scan of the
        tenant's vectors cached in this process (exact, below the index threshold), every hit
        checked against its row.
        An exact scan in SQL cost pgvector's per-row work, ~1 µs a vector: 11.4 ms for a tenant
        of 9,090 memories against SQLite's 1.2 (issue 32). A search of a tenant already cached
        waits for the server twice: the tenant's state and its new vectors, asked at once, then
        the hits' rows (it was four queries on two connections, 8.3 ms of a 10.6 ms hybrid
        search at load 5.5 where SQLite's whole vector search took 2.1)."""
        tenant, dim = scope.tenant, int(vector.shape[0])
        with self.reading() as conn:
            state, fresh = self._first_questions(conn, tenant, layer)
            if state.index_dim != dim:
                return self._search_cached(conn, state.generation, fresh, tenant, layer, vector,
                                           filters, limit)  # fmt: skip
            if not state.behind:
                return self.vectors.search_index(conn, tenant, layer, vector, filters, limit, state)
        self.vectors.catch_up(tenant, layer, dim)
        with self.reading() as conn:
            state = vector_rows.search_state(conn, tenant, layer)
            return self.vectors.search_index(conn, tenant, layer, vector, filters, limit, state)

    def _first_questions(
        self, conn: PgConn, tenant: str, layer: Layer
    ) -> tuple[vector_rows.SearchState, vector_search_core.NewVectors | None]:
        """The tenant's search state and, when this process caches its vectors, those written
        since, in one round trip (pipeline mode, synced once)."""
        with self._cache_lock:
            known = self._caches.peek(tenant, layer)
            since = None if known is None else known.max_seq
        with conn.raw.pipeline():
            asked = vector_rows.ask_search_state(conn, tenant, layer)
            loaded = None
            if since is not None:
                loaded = vector_search_core.ask_new_vectors(conn, tenant, layer, since)
        state = vector_rows.search_state_of(asked)
        if known is None or since is None or loaded is None:
            return state, None
        return state, vector_search_core.NewVectors(known, since, loaded.fetchall())

    # -- turns and the text index ------------------------------------------------------------
    @contextmanager
    def _turn_writing(self, tenant: str, sessions: Sequence[str]) -> Iterator[PgConn]:
        """Captures of one session are serialised by its lock; those of other sessions of the
        tenant run alongside (under the tenant's lock, shared), but never alongside a write
        that takes the tenant's lock (a layer commit, an erase, the text index's catch-up).
        Each session's last turns are read before the new ones are written, in the round trip
        of the first insert (`capture_index.Tails`)."""
        keys = [session_key(tenant, s) for s in sessions]
        with self._pool.writing(keys, [tenant], pipelined=True) as conn:
            yield capture_index.CaptureConn(conn.raw, tenant, sessions)

    def _turn_extra(self, tenant: str) -> dict[str, Any]:
        """Captured turns are indexed before their transaction ends (`_turns_added`): written
        unmarked, they never enter the index of marked rows, and setting their lengths then
        rewrites no index entry (an unchanged indexed column keeps the update in place)."""
        return {"fts_dirty": False}

    def _turns_added(
        self, conn: PgConn, tenant: str, stored: Sequence[Turn], rids: Mapping[str, int]
    ) -> None:
        """Index the new turns and the turn before them (their next neighbour is new), in the
        capture's transaction: a capture is one transaction, and leaves nothing to catch up."""
        first: dict[str, int] = {}
        for turn in stored:
            first[turn.session] = min(first.get(turn.session, turn.seq), turn.seq)
        for session, seq in first.items():
            mine = [t for t in stored if t.session == session]
            capture_index.index_captured(conn, self._tokenizer, tenant, session, seq, mine, rids)

    def _after_write(self, tenant: str, layer: Layer) -> None:
        if layer is Layer.L1:
            self._catch_up(tenant, layer)

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

    def _search_text(self, tenant: str, layer: Layer, query: TextQuery) -> list[Candidate]:
        keys = text_search.query_keys(self._tokenizer, tenant, query.text, query.phrases)
        asked = (query.filters, query.limit, query.fields)
        if not query.leaves_common_out:  # the common case: one round trip when nothing waits
            with self.reading() as conn, conn.raw.pipeline():
                dirty = text_index.dirty(conn, tenant, layer)
                found = text_search.ranked(conn, tenant, layer, keys, *asked)
                if not bool(dirty.fetchone()[0]):
                    return text_search.candidates(found)
        self._catch_up(tenant, layer)
        with self.reading() as conn:
            if query.leaves_common_out:
                rows, _ = text_search.totals(conn, tenant, layer)
                keys = text_search.discriminative(conn, tenant, layer, keys, query.common_cap(rows))
            found = text_search.ranked(conn, tenant, layer, keys, *asked)
            return text_search.candidates(found)

    # -- erasing -----------------------------------------------------------------------------
    def erase_session(self, scope: Scope, session: str) -> dict[str, int]:
        with self.writing(key=scope.tenant) as conn:
            counts = erase.erase_session(conn, scope.tenant, session)
        self._forget_caches(scope.tenant)
        return counts

    def delete_records(self, conn: Any, tenant: str, layer: Layer, ids: Sequence[str]) -> int:
        """As the core's, and the text index's totals lowered by what went (its rows go with
        their records: `ON DELETE CASCADE`)."""
        lengths: list[int | None] = []
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ", ".join("?" for _ in chunk)
            rows = conn.execute(
                f"DELETE FROM {TABLES[layer]} WHERE tenant = ? AND id IN ({marks})"
                " RETURNING fts_len",
                (tenant, *chunk),
            ).fetchall()
            lengths += [r[0] for r in rows]
        text_index.forget_rows(conn, tenant, layer, lengths)
        return len(lengths)

    def erase_tenant(self, scope: Scope) -> dict[str, int]:
        with self.writing(key=scope.tenant) as conn:
            counts = erase.erase_tenant(conn, scope.tenant)
            indexes = self.vectors.forget_tenant(conn, scope.tenant)
        self._forget_caches(scope.tenant)
        self.vectors.drop_indexes(indexes)
        return counts
