"""`PgVectors`: the PostgreSQL store's vector side (pgvector rows, searches, per-tenant indexes).

Vectors are decoded into pgvector rows after each vector write and before each search
(`vector_rows.py`); once a tenant has `ann_min_vectors` vectors in a layer, a background thread
builds its own HNSW index (`vector_index.py`) and its searches go through it once it is recorded
(`vector_search.py`); until then the store scans the tenant's vectors cached in the process
(`PostgresStore.search_vector`).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from stratamem.domain import Layer
from stratamem.store.core.port import Candidate, Filters
from stratamem.store.postgres import vector_index, vector_rows, vector_search
from stratamem.store.postgres.connection import PgConn

if TYPE_CHECKING:
    from stratamem.store.postgres.store import PostgresStore

_log = logging.getLogger(__name__)
TRACKED_MAX = 4_096
"""Tenants (and layers) whose vector count and index this process keeps in memory: past it,
they are all forgotten, and each is read from the database again when it next grows, so a
long-running process does not keep an entry for every tenant it ever wrote for."""


class PgVectors:
    def __init__(
        self, store: PostgresStore, ann_min_vectors: int | None, background_builds: bool
    ) -> None:
        self._store = store
        self.ann_min_vectors = ann_min_vectors or vector_index.ANN_MIN_VECTORS
        self._background = background_builds
        self._lock = threading.Lock()
        self.tracked_max = TRACKED_MAX
        self._counts: dict[tuple[str, Layer], int] = {}
        self._indexed: set[tuple[str, Layer]] = set()
        self._builds: dict[tuple[str, Layer], threading.Thread] = {}
        self._building: dict[tuple[str, Layer], psycopg.Connection[Any]] = {}

    @property
    def tracked(self) -> int:
        """How many (tenant, layer) pairs this process keeps a count or index mark of."""
        with self._lock:
            return len(set(self._counts) | self._indexed)

    def close(self) -> None:
        """Cancel the builds under way (each leaves an invalid index, dropped by the next)."""
        with self._lock:
            for conn in self._building.values():
                conn.cancel_safe()
            threads = list(self._builds.values())
        for thread in threads:
            thread.join()

    # -- writing -----------------------------------------------------------------------------
    def catch_up(self, tenant: str, layer: Layer, dim: int, build: bool = True) -> None:
        """Decode the tenant's vectors written since it last did; start its index's build if
        it has just grown past `ann_min_vectors`."""
        dim = self._bound_dim() or dim
        added = 0
        with self._store.reading() as conn:
            if not vector_rows.behind(conn, tenant, layer):
                return
        while True:
            with self._store.writing(key=tenant) as conn:
                done = vector_rows.catch_up_batch(conn, tenant, layer, dim)
            added += done
            if done < vector_rows.BATCH_ROWS:
                break
        if build and self._background and self._grown(tenant, layer, added):
            self._start_build(tenant, layer, dim)

    def _bound_dim(self) -> int | None:
        info = self._store.embedding_info()
        return None if info is None else info.dim

    def _grown(self, tenant: str, layer: Layer, added: int) -> bool:
        """Whether the tenant has `ann_min_vectors` vectors or more and no index yet (counted
        in the database once, then by what this process adds, until it is large)."""
        key = (tenant, layer)
        with self._lock:
            if key in self._indexed:
                return False
            count = self._counts.get(key)
            if count is not None:
                self._counts[key] = count = count + added
                if count < self.ann_min_vectors:
                    return False
        with self._store.reading() as conn:
            count = vector_index.vector_count(conn, tenant, layer)
            indexed = vector_index.built(conn, tenant, layer) is not None
        with self._lock:
            if max(len(self._counts), len(self._indexed)) >= self.tracked_max:
                self._counts.clear()  # forgotten ones are counted in the database again
                self._indexed.clear()
            self._counts[key] = count
            if indexed:
                self._indexed.add(key)
        return count >= self.ann_min_vectors and not indexed

    def _start_build(self, tenant: str, layer: Layer, dim: int) -> None:
        key = (tenant, layer)
        with self._lock:
            if key in self._builds:
                return
            thread = threading.Thread(
                target=self._build_logged, args=(tenant, layer, dim), daemon=True,
                name=f"vector-index-{layer.value}",
            )  # fmt: skip
            self._builds[key] = thread
        thread.start()

    def _build_logged(self, tenant: str, layer: Layer, dim: int) -> None:
        try:
            self.build(tenant, layer, dim)
        except (psycopg.Error, OSError) as exc:  # the tenant stays on the exact search
            _log.warning("building the vector index of a tenant failed: %s", exc)
        finally:
            with self._lock:
                self._builds.pop((tenant, layer), None)

    def build(self, tenant: str, layer: Layer, dim: int | None = None) -> bool:
        """Build the tenant's index now, on a connection of its own (False: another process
        is building it)."""
        dim = dim or self._bound_dim()
        if dim is None:
            return False
        key = (tenant, layer)
        with psycopg.connect(self._store.url, autocommit=True) as conn:
            with self._lock:
                self._building[key] = conn
            try:
                return vector_index.build(conn, tenant, layer, dim)
            finally:
                with self._lock:
                    self._building.pop(key, None)

    def index_tenant(self, tenant: str, layer: Layer) -> None:
        """Decode the tenant's vectors, and build its index now if it is large enough (a bulk
        copy calls it: its process ends before a background build would)."""
        dim = self._bound_dim()
        if dim is None:
            return
        self.catch_up(tenant, layer, dim, build=False)
        with self._store.reading() as conn:
            count = vector_index.vector_count(conn, tenant, layer)
        if count >= self.ann_min_vectors:
            self.build(tenant, layer, dim)

    def wait_for_builds(self) -> None:
        """Return once the builds started by this process have ended."""
        with self._lock:
            threads = list(self._builds.values())
        for thread in threads:
            thread.join()

    # -- searching ---------------------------------------------------------------------------
    @staticmethod
    def search_index(
        conn: PgConn, tenant: str, layer: Layer, vector: np.ndarray, filters: Filters,
        limit: int, state: vector_rows.SearchState,
    ) -> list[Candidate]:  # fmt: skip
        """The search through the tenant's own HNSW index (`state`, read on `conn`); the exact
        search in SQL if it has none of the query's dimension."""
        index = None
        if state.index_dim is not None and state.index_dim == vector.shape[0]:
            index = vector_search.AnnIndex(state.index_dim, state.pieces)
        return vector_search.search(conn, tenant, layer, vector, filters, limit, index)

    # -- forgetting --------------------------------------------------------------------------
    def forget_all(self, conn: PgConn) -> None:
        """Every vector row, mark and index (a new model: everything is embedded again), in
        the caller's transaction (dropping an index there locks the table briefly)."""
        vector_rows.forget_all(conn)
        vector_index.forget(conn, None)
        vector_index.drop_in_transaction(conn, vector_index.leftover(conn))
        with self._lock:
            self._counts.clear()
            self._indexed.clear()

    def forget_tenant(self, conn: PgConn, tenant: str) -> list[str]:
        """Forget the tenant's indexes in the caller's transaction; drop them with
        `drop_indexes` after it commits."""
        with self._lock:
            for layer in Layer:
                self._counts.pop((tenant, layer), None)
                self._indexed.discard((tenant, layer))
        return vector_index.forget(conn, tenant)

    def drop_indexes(self, names: list[str]) -> None:
        if names:
            with psycopg.connect(self._store.url, autocommit=True) as conn:
                vector_index.drop(conn, names)
