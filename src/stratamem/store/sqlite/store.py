"""`SqliteStore`: the embedded system of record (one file, WAL, FTS5, exact vector scan).

Everything but what truly differs is `SqlCoreStore` (`store/core/store.py`); here are the
connections (one writer behind a lock: every write of the file is serialised anyway; a few
read-only ones beside it, `readers.py`, so reads need not wait for writes), FTS5 search, the
turn row with its scope token (the full-text triggers index it), vectors sequenced by a counter,
and erasing with `secure_delete`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from stratamem.domain import Layer, Scope
from stratamem.errors import StoreError
from stratamem.store import erasure, fencing
from stratamem.store.core.port import Candidate, Fence
from stratamem.store.core.scope_tokens import tenant_token
from stratamem.store.core.store import TABLES, SqlCoreStore, next_counter
from stratamem.store.core.text_query import TextQuery
from stratamem.store.sqlite import erase, retrieval
from stratamem.store.sqlite.connection import connect, write_transaction
from stratamem.store.sqlite.migrations import migrate
from stratamem.store.sqlite.readers import DEFAULT_READERS, ReaderPool, connect_reader

_SIZE_TTL_S = 30.0
#: Counts kept before they are all dropped (re-counting is cheap; this keeps them few).
_SIZES_MAX = 4_096


class _Writer(threading.local):
    depth = 0  # how deep this thread is inside the writer's lock


class SqliteStore(SqlCoreStore):
    """The `Store` contract on one SQLite file. Safe to share across threads and processes.

    Reads go to a pool of up to `readers` read-only connections (WAL: they see every committed
    write, none waits for the writer); a read inside this thread's write transaction uses the
    writer, so it sees what the transaction wrote. `readers=0` reads on the writer, as writes.
    """

    def __init__(
        self, path: Path, synchronous: str = "NORMAL", readers: int = DEFAULT_READERS
    ) -> None:
        super().__init__()
        if readers < 0:
            raise StoreError(f"readers must be 0 or more, got {readers}")
        self.path = path
        self._conn = connect(path, synchronous)
        self._lock = threading.RLock()
        self._writer = _Writer()
        self._sizes: dict[tuple[str, Layer], tuple[int, float]] = {}
        with self._lock:
            migrate(self._conn)
        where = path.resolve()  # readers open later, maybe after a change of directory
        self.readers = ReaderPool(lambda: connect_reader(where), readers) if readers else None
        self.searches_in_parallel = self.readers is not None  # a search's lists on two readers

    def close(self) -> None:
        if self.readers is not None:
            self.readers.close()
        with self._lock:
            self._conn.close()

    @contextmanager
    def _holding_writer(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._writer.depth += 1
            try:
                yield self._conn
            finally:
                self._writer.depth -= 1

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection for reads (also by the store's extensions: layers, offload): a reader,
        or the writer inside this thread's write transaction (or without readers)."""
        if self.readers is None or self._writer.depth:
            with self._holding_writer() as conn:
                yield conn
            return
        with self.readers.borrowed() as conn:
            yield conn

    @contextmanager
    def writing(
        self, fence: Fence | None = None, key: str | None = None
    ) -> Iterator[sqlite3.Connection]:
        """One short write transaction; with a `fence`, refused unless its token is the newest.
        Every write transaction of the file is serialised, whatever its `key`."""
        with self._holding_writer() as conn, write_transaction(conn):
            if fence is not None:
                fencing.check_and_record(conn, fence)
            yield conn

    def _write_vectors(
        self, conn: Any, layer: Layer, items: Sequence[tuple[str, str]], blobs: Sequence[bytes]
    ) -> None:
        start = next_counter(conn, "emb_seq", by=len(items)) - len(items) + 1
        conn.executemany(
            f"UPDATE {TABLES[layer]} SET embedding = ?, emb_seq = ?"
            " WHERE tenant = ? AND id = ?",
            [(blobs[i], start + i, t, rec_id) for i, (t, rec_id) in enumerate(items)],
        )

    def _turn_extra(self, tenant: str) -> dict[str, Any]:
        return {"scope_token": tenant_token(tenant)}  # the full-text triggers index it

    # -- retrieval ---------------------------------------------------------------------------
    def _search_text(self, tenant: str, layer: Layer, query: TextQuery) -> list[Candidate]:
        with self.reading() as conn:
            try:
                return retrieval.search_text(
                    conn, tenant, layer, query, self._tenant_rows(conn, tenant, layer)
                )
            except sqlite3.OperationalError as exc:
                raise StoreError(f"full-text search failed: {exc}") from exc

    def _tenant_rows(self, conn: sqlite3.Connection, tenant: str, layer: Layer) -> int:
        """Rows the tenant has in a layer, re-counted at most every `_SIZE_TTL_S` seconds.

        Only steers the choice of a query plan, never a result, so a stale count is harmless.
        """
        key = (tenant, layer)
        cached = self._sizes.get(key)
        if cached is not None and time.monotonic() - cached[1] < _SIZE_TTL_S:
            return cached[0]
        row = conn.execute(
            f"SELECT count(*) FROM {TABLES[layer]} WHERE tenant = ?", (tenant,)
        ).fetchone()
        if len(self._sizes) >= _SIZES_MAX:
            self._sizes.clear()
        self._sizes[key] = (int(row[0]), time.monotonic())
        return int(row[0])

    # -- erasing -----------------------------------------------------------------------------
    def erase_session(self, scope: Scope, session: str) -> dict[str, int]:
        with self.forgetting(scope.tenant) as conn:
            counts = erase.erase_session(conn, scope.tenant, session)
        self._forget_caches(scope.tenant)
        return counts

    def erase_tenant(self, scope: Scope) -> dict[str, int]:
        with self.forgetting(scope.tenant) as conn:
            counts = erasure.erase_tenant(conn, scope.tenant)
        self._forget_caches(scope.tenant)
        return counts

    @contextmanager
    def forgetting(self, tenant: str) -> Iterator[sqlite3.Connection]:
        """A forget's transaction with `secure_delete`; after it, the full-text indexes are
        merged (a deleted row's words stay in their segments until then) and the log is
        checkpointed and truncated, so the file holds no copy of what was forgotten.

        The readers' gate is shut throughout: it starts once the reads lent before it are done,
        and reads asked for meanwhile wait for its end, when nothing cached of the tenant is
        left either; so no read sees the forgotten rows once the forget has begun."""
        with self._readers_shut():
            with self._secure_delete():
                with self.writing() as conn:
                    yield conn
                for table in ("turns_fts", "memories_fts"):
                    self._conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._sizes.clear()
            self._forget_caches(tenant)

    def _readers_shut(self) -> AbstractContextManager[None]:
        return nullcontext() if self.readers is None else self.readers.shut()

    @contextmanager
    def _secure_delete(self) -> Iterator[None]:
        """Overwrite freed pages while erasing, so deleted text does not linger in the file."""
        with self._holding_writer() as conn:
            conn.execute("PRAGMA secure_delete = ON")
            try:
                yield
            finally:
                conn.execute("PRAGMA secure_delete = OFF")
