"""Read-only connections to the store's file, lent to one thread at a time (issue 32).

In WAL mode a reader never waits for the writer, nor the writer for a reader, so recalls need
not queue behind captures on the writer's lock. A thread that asks again while it holds one
gets the same connection back (nested reads cannot exhaust the pool, nor deadlock with a gate).

A forget shuts the gate (`shut`): no reader is lent meanwhile, and it goes on only once every
lent reader has come back, so no read that started before an erase sees its rows after it (and
the log can be checkpointed and truncated). `close` shuts it for good and closes them all.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from stratamem.errors import StoreError
from stratamem.store.core import tenant_words
from stratamem.store.sqlite.connection import BUSY_TIMEOUT_MS

#: Readers a store opens at most, unless told otherwise (the service's request threads share
#: them; more than the cores buys little, SQLite's work holds the GIL between its calls).
DEFAULT_READERS = 3


def connect_reader(path: Path) -> sqlite3.Connection:
    """A connection that may only read (`query_only`); the file is in WAL already (the writer
    opened it first)."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        tenant_words.register(conn)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open a reader of the store at {path}: {exc}") from exc
    return conn


class _Held(threading.local):
    conn: sqlite3.Connection | None = None
    depth = 0


class ReaderPool:
    """At most `size` readers, opened when first needed, with a gate forgets shut."""

    def __init__(self, open_reader: Callable[[], sqlite3.Connection], size: int) -> None:
        if size < 1:
            raise StoreError(f"a reader pool needs at least one reader, got {size}")
        self._open = open_reader
        self._size = size
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0
        self._lent = 0
        self._shut = 0  # forgets (and close) that hold the gate shut
        self._queued = 0  # threads waiting for a reader
        self._closed = False
        self._changed = threading.Condition()
        self._held = _Held()

    @contextmanager
    def borrowed(self) -> Iterator[sqlite3.Connection]:
        """A reader for this thread, until the block ends."""
        held = self._held
        if held.conn is None:
            held.conn = self._borrow()
        held.depth += 1
        try:
            yield held.conn
        finally:
            held.depth -= 1
            if held.depth == 0:
                conn, held.conn = held.conn, None
                self._give_back(conn)

    def _borrow(self) -> sqlite3.Connection:
        with self._changed:
            self._queued += 1
            self._changed.notify_all()
            try:
                while not self._closed and (self._shut or not self._can_lend()):
                    self._changed.wait()
            finally:
                self._queued -= 1
            if self._closed:
                raise StoreError("the store is closed")
            self._lent += 1
            if self._idle:
                return self._idle.pop()
            self._opened += 1
        try:
            return self._open()
        except BaseException:
            with self._changed:
                self._opened -= 1
                self._lent -= 1
                self._changed.notify_all()
            raise

    def _can_lend(self) -> bool:
        return bool(self._idle) or self._opened < self._size

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._changed:
            self._lent -= 1
            self._idle.append(conn)
            self._changed.notify_all()

    @contextmanager
    def shut(self) -> Iterator[None]:
        """No reader is lent inside the block, which starts once every lent one came back.
        A thread that holds a reader itself must not shut the gate (it would wait for itself)."""
        if self._held.conn is not None:
            raise StoreError("a thread that holds a reader cannot shut the readers' gate")
        with self._changed:
            self._shut += 1
            self._changed.notify_all()
            try:
                while self._lent:
                    self._changed.wait()
            except BaseException:
                self._reopen()
                raise
        try:
            yield
        finally:
            with self._changed:
                self._reopen()

    def _reopen(self) -> None:
        self._shut -= 1
        self._changed.notify_all()

    def close(self) -> None:
        """Wait for the lent readers, then close every reader; none is lent after."""
        with self.shut(), self._changed:
            self._closed = True
            for conn in self._idle:
                conn.close()
            self._idle.clear()
            self._changed.notify_all()

    # -- what tests observe ------------------------------------------------------------------
    def wait_until(self, done: Callable[[ReaderPool], bool], bound_s: float | None = None) -> bool:
        """Block until `done(self)` holds (checked after every change of the pool), or until
        `bound_s` ran out; whether it holds."""
        with self._changed:
            return self._changed.wait_for(lambda: done(self), bound_s)

    @property
    def lent(self) -> int:
        return self._lent

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def gate_shut(self) -> bool:
        return self._shut > 0

    @property
    def size(self) -> int:
        return self._size

    @property
    def opened(self) -> int:
        return self._opened
