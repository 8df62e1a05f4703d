"""A tiny system of record for the crash tests: every write is fenced by the lock token.

Each execution writes a `begin` row and, after its work, an `end` row, both through
`fence_check` in the same transaction; a write under a stale token is refused and recorded in
`refused`. Afterwards the tests read who ran what, when, under which token.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from stratamem.errors import StaleFencingToken
from stratamem.layers.cascade import cascade
from stratamem.pipeline.executors import ExecResult, ExecutionContext, ExecutorRegistry
from stratamem.pipeline.fencing import ensure_fences, fence_check
from stratamem.pipeline.task_type import registered

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS executions (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " task_id TEXT, key TEXT, token INTEGER, pid INTEGER, phase TEXT, at REAL, attempt INTEGER)",
    "CREATE TABLE IF NOT EXISTS refused (task_id TEXT, key TEXT, token INTEGER, pid INTEGER,"
    " phase TEXT, at REAL)",
)


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def init(path: Path) -> None:
    conn = connect(path)
    ensure_fences(conn)
    for ddl in SCHEMA:
        conn.execute(ddl)
    conn.close()


def write(path: Path, ctx: ExecutionContext, phase: str) -> None:
    """One fenced row. Its time is read inside the write transaction, so times follow the
    order in which writes committed (a time read before `BEGIN` could predate a write that
    committed first, and an accepted end would seem to overlap the next begin)."""
    key, token = ctx.lock_key or "-", ctx.fence_token or 0
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        row = (ctx.task.id, key, token, os.getpid(), phase, time.time())
        try:
            fence_check(conn, key, token, ctx.fence_owner)
        except StaleFencingToken:
            conn.execute("ROLLBACK")
            conn.execute("INSERT INTO refused VALUES (?, ?, ?, ?, ?, ?)", row)
            raise
        conn.execute(
            "INSERT INTO executions (task_id, key, token, pid, phase, at, attempt)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*row, ctx.task.attempt),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


async def fenced_work(ctx: ExecutionContext) -> ExecResult:
    path = Path(os.environ["CRASH_FENCED_DB"])
    await asyncio.to_thread(write, path, ctx, "begin")
    await asyncio.sleep(float(os.environ.get("CRASH_WORK_S", "0.05")))
    if ctx.task.payload.get("poison"):
        raise RuntimeError("poison task")
    await asyncio.to_thread(write, path, ctx, "end")
    return ExecResult(changed=False)


def registry() -> ExecutorRegistry:
    executors = ExecutorRegistry((t, fenced_work) for t in registered())
    executors.add_cascade(cascade)  # the layers' L1 -> L2 -> L3
    return executors


@dataclass(frozen=True)
class Execution:
    task_id: str
    key: str
    token: int
    pid: int
    begin: float
    end: float | None


def executions(path: Path) -> list[Execution]:
    conn = connect(path)
    rows = conn.execute(
        "SELECT b.task_id, b.key, b.token, b.pid, b.at, e.at FROM executions b"
        " LEFT JOIN executions e ON e.task_id = b.task_id AND e.token = b.token"
        " AND e.pid = b.pid AND e.phase = 'end' AND e.key = b.key"
        " WHERE b.phase = 'begin' ORDER BY b.seq"
    ).fetchall()
    conn.close()
    return [Execution(*row) for row in rows]


def accepted_tokens_in_commit_order(path: Path) -> dict[str, list[int]]:
    conn = connect(path)
    out: dict[str, list[int]] = {}
    for key, token in conn.execute("SELECT key, token FROM executions ORDER BY seq"):
        out.setdefault(key, []).append(token)
    conn.close()
    return out


def refused_count(path: Path) -> int:
    conn = connect(path)
    (n,) = conn.execute("SELECT COUNT(*) FROM refused").fetchone()
    conn.close()
    return int(n)


def running(path: Path, pid: int, ignore: set[str]) -> list[Execution]:
    """The executions `pid` has begun and not ended (but those of tasks in `ignore`)."""
    return [e for e in executions(path) if e.pid == pid and e.end is None
            and e.task_id not in ignore]  # fmt: skip


def taken_over(path: Path, pid: int, ignore: set[str]) -> bool:
    """Whether every execution `pid` has begun and not ended (but those of `ignore`) was taken
    over: another execution began on its key under a newer token, so its next write is refused."""
    runs = executions(path)
    return all(any(o.key == e.key and o.token > e.token for o in runs)
               for e in running(path, pid, ignore))  # fmt: skip


def running_pids(path: Path, ignore: set[str]) -> set[int]:
    """Pids with an execution begun and not ended (tasks in `ignore`, which fail on purpose
    and never end, left out)."""
    return {e.pid for e in executions(path) if e.end is None and e.task_id not in ignore}
