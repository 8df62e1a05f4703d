"""Retention benchmark: how long pruning a backlog of the execution log and receipts holds the
store's write lock, against deleting it in one statement.

A SQLite store with `--rows` ended executions and as many receipts (one per task, all past the
retention; written with plain INSERTs, the fastest way to a backlog) and an empty SQLite
pipeline backend. Measured in the same run:

- `batched`: `LogPruner` passes with the default settings (10 batches of 500 rows per table a
  pass) until nothing is left: passes, total time, the longest and median write transaction
  (each `prune_log` call is one);
- baseline, `one_delete`: on a copy of the same store, every row past the retention deleted in
  one transaction (`DELETE … WHERE ended_at < ?` and `… completed_at < ?`): how long one
  unbounded prune would hold the write lock.

    python bench/retention.py [--rows 100000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stratamem.pipeline.retention import LogPruner
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.store.evidence.retention import LogRow, LogTable, ThreadedRetainedLog
from stratamem.store.evidence.store import SqlEvidenceStore
from stratamem.store.sqlite import SqliteStore

NOW = 1_000_000_000.0


class TimedLog(SqlEvidenceStore):
    """Times each write transaction of the prune."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.writes: list[float] = []

    def prune_log(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int:
        started = time.perf_counter()
        deleted = super().prune_log(table, rows, before)
        self.writes.append(time.perf_counter() - started)
        return deleted


def seed(path: Path, rows: int) -> None:
    store = SqliteStore(path)
    with store.writing() as conn:
        conn.executemany(
            "INSERT INTO executions (tenant, task_id, attempt, delivery, worker, started_at,"
            " type, ended_at, outcome) VALUES ('acme', ?, 0, 1, 'w0', ?, 'L1', ?, 'completed')",
            [(f"t{i}", float(i), float(i) + 1) for i in range(rows)],
        )
        conn.executemany(
            "INSERT INTO layer_receipts (tenant, task_id, kind, completed_at, result)"
            " VALUES ('acme', ?, 'L1', ?, '{}')",
            [(f"t{i}", float(i) + 1) for i in range(rows)],
        )
    store.close()


async def batched(path: Path, pipeline: Path) -> dict[str, Any]:
    store = SqliteStore(path)
    log, backend = TimedLog(store), SqliteBackend(pipeline)
    pruner = LogPruner(backend, ThreadedRetainedLog(log), PipelineSettings())
    started, passes = time.perf_counter(), 0
    while sum((await pruner.run(NOW)).deleted.values()):
        passes += 1
    elapsed = time.perf_counter() - started
    await backend.close()
    store.close()
    return {"passes": passes, "total_s": round(elapsed, 3),
            "longest_write_ms": round(max(log.writes) * 1000, 1),
            "median_write_ms": round(statistics.median(log.writes) * 1000, 1)}  # fmt: skip


def one_delete(path: Path) -> dict[str, Any]:
    store = SqliteStore(path)
    started = time.perf_counter()
    with store.writing() as conn:
        conn.execute("DELETE FROM executions WHERE ended_at IS NOT NULL AND ended_at < ?", (NOW,))
        conn.execute("DELETE FROM layer_receipts WHERE completed_at < ?", (NOW,))
    elapsed = time.perf_counter() - started
    store.close()
    return {"write_ms": round(elapsed * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seed(root / "store.db", args.rows)
        shutil.copy(root / "store.db", root / "copy.db")
        result = {"rows": args.rows, "batched": asyncio.run(batched(root / "store.db",
                                                                    root / "pipeline.db")),
                  "one_delete": one_delete(root / "copy.db")}  # fmt: skip
    ratio = result["one_delete"]["write_ms"] / result["batched"]["longest_write_ms"]
    result["longest_hold_ratio"] = round(ratio, 1)
    if args.json:
        print(json.dumps(result))
        return
    b, o = result["batched"], result["one_delete"]
    print(f"{args.rows} executions and {args.rows} receipts past the retention")
    print(f"batched: {b['passes']} passes, {b['total_s']} s, longest write"
          f" {b['longest_write_ms']} ms (median {b['median_write_ms']} ms)")  # fmt: skip
    print(f"one delete: write lock held {o['write_ms']} ms ({ratio:.1f}x the longest batch)")


if __name__ == "__main__":
    main()
