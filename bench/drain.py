"""Drain rate of a backlog of owed L1 work, against the consumers' capacity.

A store with `--sessions` sessions of one user turn each (one tenant each, so no memory has a
neighbour to reconcile with: one LLM call per task), all owed L1 and due at once. Then 1, 2, 4
(`--processes`) `stratamem worker` processes (the layers' executors, `--concurrency` consumers
each, the backlog scheduler beside each: captured turns reach L1 only through it) drain it
against the scripted OpenAI-compatible server answering every call after `--latency-s`.

Reported per process count: tasks per second between 10 % and 90 % of the sessions done, and
that rate as a fraction of the capacity, `processes * concurrency / (latency_s * calls per
task)` (calls per task counted on the endpoint): what the consumers could do if none ever
waited for a task. The goal is >= 0.8 at every count. Also the CPU the worker processes spent
per task between 10 % and 90 % (`cpu_ms_per_task`, from /proc, start-up left out: it depends
little on the machine's load) and the run's load average: on a shared machine whose cores are
busy, the fraction measures the machine, and the CPU per task says what the code costs.

`--count-writes` runs the workers with `bench/sqlite_count` (which slows them: take rates from
plain runs) and adds, per SQLite file, the write transactions a task (`BEGIN IMMEDIATE`s over
the tasks started in the execution log, the whole run), how many of them first found the file
busy, and the milliseconds a task spent in `BEGIN IMMEDIATE` and `COMMIT`: each write
transaction serialises the processes on that file, and that count does not depend on the load.

    python bench/drain.py [--processes 1,2,4] [--sessions 0] [--backend sqlite|redis] [--json]

`--sessions 0` (the default) sizes each run to about `--seconds` of work at capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.testing import ScriptedLLM
from stratamem.testing.layers import l1_reply, reconcile_reply
from stratamem.testing.replies import RecordedRequest, Reply

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = "redis://127.0.0.1:6379/0"
STORE_FILE = "stratamem.db"
POLL_S = 0.1
START_TIMEOUT_S = 120.0


def slow(handler: Callable[[RecordedRequest], Reply], latency_s: float) -> Any:
    def answer(request: RecordedRequest) -> Reply:
        time.sleep(latency_s)  # the endpoint's fixed latency (a server thread per request)
        return handler(request)

    return answer


def fill(data: Path, sessions: int) -> None:
    settings = Settings(data_dir=data, embedder="hash:64", background_embedding=False)
    memory = AsyncMemory.open(settings, llm=None)

    async def capture() -> None:
        for i in range(sessions):
            turn = {"role": "user", "speaker": "Maria", "text": f"I moved to town number {i}."}
            await memory.capture(f"t{i:05}", "s", [turn])
        await memory.aclose()

    asyncio.run(capture())


def owed(data: Path) -> int:
    with sqlite3.connect(data / STORE_FILE, timeout=30) as conn:
        (n,) = conn.execute(
            "SELECT COUNT(*) FROM session_heads WHERE last_seq > cursor_seq"
        ).fetchone()
    return int(n)


def worker_env(
    data: Path, llm: ScriptedLLM, backend: str, prefix: str, args: Any
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    env.update({
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
        "STRATAMEM_DATA_DIR": str(data),
        "STRATAMEM_EMBEDDER": "hash:64",
        "STRATAMEM_BACKGROUND_EMBEDDING": "false",
        "STRATAMEM_LLM_BASE_URL": llm.base_url,
        "STRATAMEM_LLM_MODEL": "scripted-chat",
        "STRATAMEM_PIPELINE_BACKEND": backend,
        "STRATAMEM_PIPELINE_REDIS_URL": REDIS_URL,
        "STRATAMEM_PIPELINE_REDIS_PREFIX": prefix,
        "STRATAMEM_PIPELINE_CONCURRENCY": str(args.concurrency),
        # L1 only: the cascade's L2 and the scheduler's L2/L3 come after the run
        "STRATAMEM_PIPELINE_L2_DELAY_S": "3600",
        "STRATAMEM_PIPELINE_SCHEDULER_GRACE_S": "3600",
    })  # fmt: skip
    env.update(item.split("=", 1) for item in args.set)
    return env


def run(processes: int, args: Any) -> dict[str, Any]:
    capacity = processes * args.concurrency / args.latency_s  # at one call per task
    sessions = args.sessions or max(int(capacity * args.seconds), 50)
    with tempfile.TemporaryDirectory(prefix="stratamem-drain-") as tmp, ScriptedLLM() as llm:
        llm.on("L1", slow(l1_reply, args.latency_s))
        llm.on("L1-reconcile", slow(reconcile_reply, args.latency_s))
        data = Path(tmp) / "data"
        fill(data, sessions)
        prefix = f"bench:drain:{uuid.uuid4().hex}:"
        env = worker_env(data, llm, args.backend, prefix, args)
        if args.count_writes:
            env["PYTHONPATH"] = f"{ROOT / 'bench' / 'sqlite_count'}{os.pathsep}{env['PYTHONPATH']}"
            env["SQLITE_COUNT_OUT"] = str(Path(tmp) / "count")
        procs = [spawn(env, Path(tmp) / f"w{n}.log", f"w{n}") for n in range(processes)]
        try:
            marks = watch(data, sessions, procs)
        finally:
            stop(procs)
            if args.backend == "redis":
                drop_prefix(prefix)
        calls = len(llm.calls("L1")) + len(llm.calls("L1-reconcile"))
        writes = counted_writes(Path(tmp)) if args.count_writes else {}
    done = sessions - marks["left"]
    per_task = calls / max(done, 1)
    rate = 0.8 * sessions / (marks["t90"] - marks["t10"])
    capacity /= max(per_task, 1.0)
    return {"processes": processes, "consumers": processes * args.concurrency,
            "sessions": sessions, "calls_per_task": round(per_task, 3),
            "tasks_per_s": round(rate, 1), "capacity_per_s": round(capacity, 1),
            "fraction": round(rate / capacity, 3),
            "first_task_s": round(marks["t_first"], 2),
            "cpu_ms_per_task": round(1000 * marks["cpu_s"] / (0.8 * sessions), 1),
            "load": os.getloadavg()[0], **writes}  # fmt: skip


def counted_writes(tmp: Path) -> dict[str, Any]:
    """Per SQLite file, write transactions, busy first tries and ms in BEGIN/COMMIT a task."""
    counts: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for dump in tmp.glob("count-*.json"):
        got = json.loads(dump.read_text())
        for name, n in got["counts"].items():
            counts[name] = counts.get(name, 0) + n
        for name, s in got["seconds"].items():
            seconds[name] = seconds.get(name, 0) + s
    tasks = max(sum(n for name, n in counts.items() if name.endswith(" task")), 1)
    files = sorted({name.split(" ")[0] for name in counts})
    return {"writes_per_task": {
        f: {"writes": round(counts.get(f"{f} write", 0) / tasks, 2),
            "busy_first": round(counts.get(f"{f} write busy", 0) / tasks, 2),
            "ms_in_begin_commit": round(
                1000 * (seconds.get(f"{f} write", 0) + seconds.get(f"{f} commit", 0)) / tasks, 1)}
        for f in files}}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a live process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spawn(env: dict[str, str], log: Path, name: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "stratamem.cli.main", "worker", "--name", name,
               "--executors", "stratamem.runtime:layer_registry"]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def watch(data: Path, sessions: int, procs: list[subprocess.Popen[bytes]]) -> dict[str, float]:
    """Seconds from the workers' start to the first task, 10 % and 90 % of the sessions done."""
    start, marks = time.monotonic(), {}
    deadline = start + START_TIMEOUT_S + sessions  # at worst a task a second
    while time.monotonic() < deadline:
        done = sessions - owed(data)
        now = time.monotonic() - start
        if done > 0:
            marks.setdefault("t_first", now)
        if done >= 0.1 * sessions and "t10" not in marks:
            marks["t10"], marks["cpu_s"] = now, -sum(cpu_seconds(p.pid) for p in procs)
        if done >= 0.9 * sessions:
            marks["t90"], marks["left"] = now, sessions - done
            marks["cpu_s"] += sum(cpu_seconds(p.pid) for p in procs)
            return marks
        if any(p.poll() is not None for p in procs):
            raise SystemExit("a worker exited early: see its log")
        time.sleep(POLL_S)  # sampling the store's progress
    raise SystemExit("the backlog did not drain in time")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drop_prefix(prefix: str) -> None:
    import redis  # noqa: PLC0415 - only with --backend redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2,4", help="worker process counts, in turn")
    parser.add_argument("--concurrency", type=int, default=4, help="consumers per process")
    parser.add_argument("--latency-s", type=float, default=0.1, help="the endpoint's latency")
    parser.add_argument("--sessions", type=int, default=0, help="owed sessions (0: auto)")
    parser.add_argument("--seconds", type=float, default=15.0, help="work per run at capacity")
    parser.add_argument("--backend", choices=["sqlite", "redis"], default="sqlite")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a STRATAMEM_* variable for the workers (repeatable)")
    parser.add_argument("--count-writes", action="store_true",
                        help="count SQLite write transactions a task (bench/sqlite_count)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(int(n), args) for n in args.processes.split(",")]
    if args.json:
        print(json.dumps({"backend": args.backend, "latency_s": args.latency_s,
                          "runs": results}, indent=2))  # fmt: skip
        return
    print(f"backend {args.backend}, endpoint latency {args.latency_s * 1000:.0f} ms,"
          f" {args.concurrency} consumers a process")  # fmt: skip
    print("processes  sessions  calls/task  tasks/s  capacity/s  fraction  first task"
          "  cpu ms/task  load")  # fmt: skip
    for r in results:
        print(f"{r['processes']:>9}  {r['sessions']:>8}  {r['calls_per_task']:>10}"
              f"  {r['tasks_per_s']:>7}  {r['capacity_per_s']:>10}  {r['fraction']:>8}"
              f"  {r['first_task_s']:>8} s  {r['cpu_ms_per_task']:>11}"
              f"  {r['load']:>4.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
