"""The fencing helper, SQLite durability across reopen, and the CLI over a real data dir."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path

import click
import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.layers.task_types import L1, L2
from stratamem.pipeline.fencing import ensure_fences, fence_check
from stratamem.pipeline.reconcile import reconcile
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.store.evidence.executions import ExecutionStart
from stratamem.store.evidence.store import SqlEvidenceStore
from stratamem.store.opening import open_store

from .conftest import REDIS_URL


def test_fence_refuses_older_token_in_the_same_transaction(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    ensure_fences(conn)
    conn.execute("CREATE TABLE notes (body TEXT)")

    def write(token: int, body: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            fence_check(conn, "session/t/s", token)
            conn.execute("INSERT INTO notes VALUES (?)", (body,))
        except StaleFencingToken:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    write(1, "first holder")
    write(2, "second holder")
    write(2, "second holder again")
    with pytest.raises(StaleFencingToken) as refused:
        write(1, "paused first holder wakes up")
    assert refused.value.newest == 2  # what a grant must be above
    fence_check(conn, "other-key", 1)
    rows = [r[0] for r in conn.execute("SELECT body FROM notes")]
    assert rows == ["first holder", "second holder", "second holder again"]


def test_a_fences_table_made_before_owners_gets_the_column_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    conn.execute("CREATE TABLE fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL)")
    conn.execute("INSERT INTO fences VALUES ('k', 3)")
    ensure_fences(conn)
    ensure_fences(conn)  # idempotent
    fence_check(conn, "k", 3, "a")  # an ownerless row: its token passes from anyone
    fence_check(conn, "k", 3, "b")
    fence_check(conn, "k", 4, "a")
    fence_check(conn, "k", 4, "a")
    with pytest.raises(StaleFencingToken) as refused:  # 4 granted twice: "a" wrote first
        fence_check(conn, "k", 4, "b")
    assert refused.value.newest == 4


async def test_sqlite_queue_survives_reopen(tmp_path: Path) -> None:
    path, now = tmp_path / "pipeline.db", 1000.0
    first = SqliteBackend(path)
    tasks = [Task(L1, "t", "s", {"n": i}) for i in range(3)]
    for task in tasks:
        await first.enqueue(task, now=now)
    [leased] = await first.consume("gone", count=1, block_ms=0, now=now)
    await first.set_timer("k", tasks[0], due_at=now + 5)
    await first.close()
    second = SqliteBackend(path)
    assert await second.list_tasks(limit=10) == tasks
    assert (await second.depth()).as_dict() == {"ready": 2, "in_flight": 1, "timers": 1, "dead": 0}
    [back] = await second.reclaim("c", min_idle_ms=1000, count=5, max_deliveries=5, now=now + 2)
    assert back.task == leased.task and back.deliveries == 2
    await second.close()


def run_cli(data_dir: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_status_and_dead_letters(tmp_path: Path) -> None:
    async def seed() -> None:
        backend = SqliteBackend(tmp_path / "pipeline.db")
        for n in range(2):
            await backend.enqueue(Task(L2, "t", "s", {"n": n}), now=time.time())
        for d in await backend.consume("c", count=2, block_ms=0, now=time.time()):
            await backend.dead_letter(d, "RuntimeError: boom", now=time.time())
        await backend.close()

    asyncio.run(seed())
    status = json.loads(run_cli(tmp_path, "pipeline", "status", "--json"))
    assert status["depth"] == {"dead": 2, "in_flight": 0, "ready": 0, "timers": 0}
    dead = [
        json.loads(line)
        for line in run_cli(tmp_path, "pipeline", "dead-letters", "list").splitlines()
    ]
    assert [d["error"] for d in dead] == ["RuntimeError: boom"] * 2
    assert "requeued task" in run_cli(
        tmp_path, "pipeline", "dead-letters", "requeue", dead[0]["id"]
    )
    assert run_cli(tmp_path, "pipeline", "dead-letters", "purge", "--all").strip() == "purged 1"
    status = json.loads(run_cli(tmp_path, "pipeline", "status", "--json"))
    assert status["depth"] == {"dead": 0, "in_flight": 0, "ready": 1, "timers": 0}
    missing = CliRunner().invoke(
        cli, ["--data-dir", str(tmp_path), "pipeline", "dead-letters", "requeue", "999"]
    )
    assert missing.exit_code == 3 and "no dead letter" in missing.output  # NotFound


def test_cli_reconcile_reports_and_changes_nothing(tmp_path: Path) -> None:
    async def seed() -> None:
        backend = SqliteBackend(tmp_path / "pipeline.db")
        await backend.enqueue(Task(L2, "t", "s"), now=time.time())
        await backend.consume("c", count=1, block_ms=0, now=time.time())
        await backend.close()

    asyncio.run(seed())
    [report] = json.loads(run_cli(tmp_path, "pipeline", "reconcile", "--json"))
    assert (report["authority"], report["finding"]) == ("current", "no execution expected")
    assert report["may_submit_completion"] is False and report["task"]["type"] == "L2"
    assert report["logged"] is None  # no execution started, none logged
    assert "L2" in run_cli(tmp_path, "pipeline", "reconcile")
    status = json.loads(run_cli(tmp_path, "pipeline", "status", "--json"))
    assert status["depth"]["in_flight"] == 1
    assert "signed with key rk_" in run_cli(tmp_path, "pipeline", "rotate-receipt-key")


def test_cli_reconcile_on_an_empty_data_dir_creates_no_pipeline_file(tmp_path: Path) -> None:
    assert json.loads(run_cli(tmp_path, "pipeline", "reconcile", "--json")) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.redis
async def test_reconcile_on_redis_creates_no_stream_or_group() -> None:
    """Evidence only: it used to make the seven task streams and their consumer groups."""
    prefix = f"test:{uuid.uuid4().hex}:"
    backend, raw = RedisBackend(REDIS_URL, prefix=prefix), aioredis.Redis.from_url(REDIS_URL)
    try:
        assert await reconcile(backend, None, PipelineSettings(), now=time.time()) == []
        assert await raw.keys(f"{prefix}*") == []
    finally:
        await backend.drop_all()
        await backend.close()
        await raw.aclose()


def test_cli_executions_lists_the_log(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, embedder="none")
    store = open_store(settings)
    try:
        evidence, clock = SqlEvidenceStore(store), ManualClock(100.0)
        start = ExecutionStart("t1", "L1", "s", "session/acme/s", 0, 1, 3, "w0")
        first = evidence.start_execution(Scope("acme"), start, clock)
        clock.advance(2)
        evidence.start_execution(Scope("acme"), replace(start, delivery=2, token=4, worker="w1"),
                               clock)  # fmt: skip
    finally:
        store.close()
    rows = json.loads(run_cli(tmp_path, "pipeline", "executions", "--tenant", "acme", "--json"))
    assert [(r["attempt"]["worker"], r["fenced_at"]) for r in rows] == [("w0", 102.0),
                                                                        ("w1", None)]  # fmt: skip
    assert rows[0]["attempt"] == first.to_json()
    text = run_cli(tmp_path, "pipeline", "executions", "--tenant", "acme", "--task", "t1")
    assert "by w0: 100.000 -> - open, fenced at 102.000" in text
    empty = tmp_path / "elsewhere"
    refused = CliRunner().invoke(cli, ["--data-dir", str(empty), "pipeline", "executions",
                                       "--tenant", "acme"])  # fmt: skip
    assert refused.exit_code == 5 and "no store" in refused.output and not empty.exists()


def test_cli_worker_refuses_bad_executors(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--data-dir", str(tmp_path), "worker", "--executors", "no.such.module:factory"]
    )
    assert result.exit_code == 5 and "cannot be loaded" in result.output  # ConfigError


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in group.commands.items():
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found.extend(_commands(command, f"{prefix}{name} "))
    return found


def test_every_pipeline_command_is_documented() -> None:
    for name, command in _commands(cli):
        if name.split()[0] in {"worker", "pipeline", "bench"}:
            assert command.help, f"`stratamem {name}` has no help text"


@pytest.mark.redis
@pytest.mark.filterwarnings("ignore::DeprecationWarning:saq.*")  # saq calls redis-py's setex
def test_bench_pipeline_prints_the_figures(tmp_path: Path) -> None:
    out = run_cli(
        tmp_path, "bench", "pipeline", "--backend", "sqlite", "--tasks", "20", "--workers", "2",
        "--repeat", "1", "--json",
    )  # fmt: skip
    report = json.loads(out.strip().splitlines()[-1])
    assert {"tasks_per_s", "p50_start_ms", "p99_start_ms", "baseline", "ratio"} <= set(report)
    assert report["baseline"]["name"] == "saq" and report["tasks_per_s"] > 0
