"""Counts a process's SQLite write transactions per file, for `bench/drain.py --count-writes`.

Put this directory first on a process's PYTHONPATH with `SQLITE_COUNT_OUT=<prefix>` set: every
`sqlite3.connect` then returns a connection that counts its `BEGIN IMMEDIATE`s (and those that
found the file busy: the pipeline backend tries on the event loop with no busy timeout first),
the seconds spent in them and in `COMMIT` (waiting for another process's write lock), and its
execution-log starts (one per task run); at exit they go to `<prefix>-<pid>.json`. A measuring
aid only: it slows the process (CPU per task about doubles), so take rates from plain runs.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import sqlite3
import threading
import time
from typing import Any

OUT = os.environ.get("SQLITE_COUNT_OUT")
COUNTS: collections.Counter[str] = collections.Counter()
SECONDS: collections.Counter[str] = collections.Counter()
LOCK = threading.Lock()
LABELS = (("BEGIN IMMEDIATE", "write"), ("COMMIT", "commit"), ("INSERT INTO EXECUTIONS", "task"))


class Counted(sqlite3.Connection):
    file = ""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        head = sql.lstrip()[:24].upper()
        label = next((name for start, name in LABELS if head.startswith(start)), None)
        if label is None:
            return super().execute(sql, *args)
        what = f"{self.file} {label}"
        started, busy = time.perf_counter(), False
        try:
            return super().execute(sql, *args)
        except sqlite3.OperationalError:
            busy = True
            raise
        finally:
            with LOCK:
                COUNTS[what + (" busy" if busy else "")] += 1
                SECONDS[what] += time.perf_counter() - started


def _connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
    kwargs.setdefault("factory", Counted)
    conn = _ORIGINAL(database, *args, **kwargs)
    if isinstance(conn, Counted):
        conn.file = os.path.basename(str(database))
    return conn


def _dump() -> None:
    with open(f"{OUT}-{os.getpid()}.json", "w") as out:
        json.dump({"counts": COUNTS, "seconds": SECONDS}, out)


if OUT:
    _ORIGINAL = sqlite3.connect
    sqlite3.connect = _connect  # type: ignore[assignment]
    atexit.register(_dump)
