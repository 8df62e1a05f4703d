"""Opening SQLite connections the way every part of stratamem wants them (in files private to
their owner: `stratamem.files`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stratamem.errors import StoreError
from stratamem.files import create_private, enter_wal
from stratamem.store.core import tenant_words

BUSY_TIMEOUT_MS = 10_000
#: `PRAGMA synchronous` levels a store may run with. In WAL mode, NORMAL loses nothing when the
#: process dies but may lose the last commits on power loss or an OS crash; FULL syncs every
#: commit to disk, at some cost in write speed.
SYNCHRONOUS_LEVELS = ("NORMAL", "FULL")


def connect(path: Path, synchronous: str = "NORMAL") -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, with a busy timeout."""
    level = synchronous.upper()
    if level not in SYNCHRONOUS_LEVELS:
        raise StoreError(f"synchronous must be one of {SYNCHRONOUS_LEVELS}, got {synchronous!r}")
    try:
        create_private(path)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        tenant_words.register(conn)  # the full-text triggers call it
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        enter_wal(conn, BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA synchronous = {level}")
        conn.execute("PRAGMA foreign_keys = ON")
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open the store at {path}: {exc}") from exc
    return conn


class StoreReadOnly(StoreError):
    """The store's files cannot be written (a read-only file, directory or file system)."""


def _read_only(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith("SQLITE_READONLY") or "readonly database" in str(exc)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE` … `COMMIT`, rolled back on any error, kept short by the callers.
    A store that cannot be written raises `StoreReadOnly`."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if not _read_only(exc):
            raise
        raise StoreReadOnly(
            f"the store cannot be written ({exc}): check the permissions of the data directory"
            " and its files, or point --data-dir / STRATAMEM_DATA_DIR at a writable one"
        ) from exc
