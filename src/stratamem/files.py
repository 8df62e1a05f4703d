"""Files that hold memories are private to their owner, and their SQLite databases in WAL.

A data directory stratamem creates is 0700, and each database file it creates 0600 (SQLite gives
the `-wal` and `-shm` files the mode of their database), because they hold every memory in
clear text. Directories and files that exist already keep their mode. Every SQLite file (the
store, the pipeline, the embedding cache) is switched to WAL by `enter_wal`, which several
processes opening a new file at once can all do.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def create_private(path: Path) -> None:
    """Create `path`'s directory (0700) and `path` itself (0600, empty), where they do not exist;
    raises `OSError` when they cannot be created."""
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))


def enter_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch the connection's file to WAL. On a new file opened by several processes at once
    (serve and its workers starting together) the switch needs a lock SQLite does not wait for
    through the busy timeout: it fails at once with "database is locked", so it is retried for
    up to `timeout_s`. A file already in WAL answers without a lock."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
