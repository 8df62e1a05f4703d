"""PostgreSQL store vs SQLite store, measured in the same run (issue 15's figures).

- search: p50/p95 of BM25 alone, the vector scan alone and both (the query vector given) over
  one tenant of `--tenant-rows` memories in a store of `--total-rows` memories (the other rows
  spread over 99 tenants), on each store. Vectors are random unit vectors of the local model's
  dimension (embedding a million texts would take hours here; it does not change a search's
  cost). Words are a Zipf-distributed vocabulary, as bench/store.py.
- capture: turns stored per second by 8 concurrent writers (each its own session, one tenant),
  in one process (8 threads) and in two (4 threads each), on each store; each process opens one
  store, as an API process does, before the clock starts; each phase writes into a database of
  its own (a new SQLite file, a new PostgreSQL database), and counts afterwards that it holds
  every turn. SQLite runs twice: at its default `synchronous=NORMAL` (in WAL, no sync at commit:
  the last commits may be lost on power loss) and at `FULL` (a sync at every commit, as
  PostgreSQL's `synchronous_commit=on`, which the bench never turns off); the ratios give
  PostgreSQL against both. With the CPU seconds of the writing processes and of the PostgreSQL
  server against the wall clock, and the load average (the machine may be shared: read the
  ratios).
- recall: with `--locomo PATH`, `stratamem eval locomo` on each store (same embedder): R@10.

    python bench/postgres.py [--tenant-rows 100000] [--total-rows 1000000] [--queries 200]
                             [--captures 400] [--locomo locomo_dev.json] [--no-search]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from answers import NothingToMeasure, require_filled  # bench/answers.py
from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Role, Scope, Turn
from stratamem.store.core.port import Filters
from stratamem.store.opening import RecordStore, open_url

_SYLLABLES = [c + v for c in "bcdfghjklmnpqrstvwxz" for v in "aeiou"]
WORDS = np.array(
    ["".join(_SYLLABLES[(i // 100**k) % 100] for k in range(3)) for i in range(20_000)]
)
_ZIPF = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.07
_ZIPF /= _ZIPF.sum()
DIM = 384
SCOPE = Scope("bench")
BATCH = 5000


def fill(store: RecordStore, tenant: str, count: int, rng: np.random.Generator) -> None:
    scope = Scope(tenant)
    for start in range(0, count, BATCH):
        memories = [
            MemoryRecord(f"m{i}", tenant, MemoryType.EPISODIC,
                         "The user " + " ".join(rng.choice(WORDS, size=int(rng.integers(6, 14)),
                                                           p=_ZIPF)),
                         valid_from=1.7e9 + i, created_at=1.7e9 + i, updated_at=1.7e9 + i,
                         mode=Mode.MANUAL)
            for i in range(start, min(count, start + BATCH))
        ]  # fmt: skip
        store.upsert_memories(scope, memories)
        vectors = rng.normal(size=(len(memories), DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.store_embeddings(Layer.L1, [(tenant, m.id) for m in memories], vectors)


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2)}  # fmt: skip


def timed(fn: Callable[[int], Any], runs: int) -> dict[str, float]:
    fn(0)
    samples = []
    for n in range(runs):
        start = time.perf_counter()
        fn(n)
        samples.append((time.perf_counter() - start) * 1000)
    return percentiles(samples)


def search_figures(
    store: RecordStore, args: argparse.Namespace, analyze: bool = False
) -> dict[str, Any]:
    """`analyze`: gather the planner's statistics after the fill, as a long-running database
    has them (before `3b68df9`, memory BM25 on never-analysed tables took 776 ms instead of
    9.5 ms over 1,000 rows; its plan no longer depends on them, nor the nearest-vector search's:
    bench/pg_vector_plan.py)."""
    rng = np.random.default_rng(7)
    others = args.total_rows - args.tenant_rows
    started = time.perf_counter()
    fill(store, SCOPE.tenant, args.tenant_rows, rng)
    for t in range(99):
        fill(store, f"other{t}", others // 99, rng)
    if analyze:
        with store.writing() as conn:
            conn.execute("ANALYZE")
    store.search_text(SCOPE, Layer.L1, "warm", Filters(), 50)  # text index caught up
    fill_s = time.perf_counter() - started
    content = _ZIPF[100:] / _ZIPF[100:].sum()
    texts = [" ".join(rng.choice(WORDS[100:], size=4, p=content)) for _ in range(args.queries)]
    vectors = rng.normal(size=(args.queries, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    require_filled(store, "search", SCOPE, args.tenant_rows, [" ".join(WORDS[:10])], vectors[0])

    def bm25(n: int) -> None:
        store.search_text(SCOPE, Layer.L1, texts[n], Filters(), 50)

    def vector(n: int) -> None:
        store.search_vector(SCOPE, Layer.L1, vectors[n], Filters(), 50)

    def hybrid(n: int) -> None:
        bm25(n)
        vector(n)

    return {
        "fill_s": round(fill_s, 1),
        "bm25": timed(bm25, args.queries),
        "vector": timed(vector, args.queries),
        "hybrid": timed(hybrid, args.queries),
    }


def _writer(store: RecordStore, name: str, count: int) -> None:
    for i in range(count):
        text = f"message number {i} about the weather " * 3
        at = 1.7e9 + i
        store.add_turns(SCOPE, [Turn(f"{name}-{i}", SCOPE.tenant, name, Role.USER, text, at)])


def _process(
    url: str, synchronous: str, names: list[str], count: int, ready: Any, cpu: Any
) -> None:
    """One API process: one store, shared by its writer threads, opened before the clock. A
    process that cannot open its store breaks the barrier, so the bench fails instead of
    waiting for it for ever."""
    try:
        store = open_url(url, Path("unused.db"), synchronous)
    except BaseException:
        ready.abort()
        raise
    try:
        ready.wait()
        before = os.times()
        threads = [threading.Thread(target=_writer, args=(store, n, count)) for n in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        after = os.times()
        cpu.put(after.user + after.system - before.user - before.system)
    finally:
        store.close()


def capture_figures(
    url: str, synchronous: str, processes: int, count: int, server: Path | None
) -> dict[str, Any]:
    """Turns stored per second by 8 writers in `processes` processes into the empty store at
    `url`, and where the time went: the CPU seconds of the writing processes and of the
    database server (`server`: a PostgreSQL data directory) against the wall-clock seconds, and
    the share of samples in which the server's backends were running, waiting for a lock,
    flushing WAL or waiting for the writers."""
    names = [f"w{processes}-{i}" for i in range(8)]
    groups = [names[i::processes] for i in range(processes)]
    ready, cpu = multiprocessing.Barrier(processes + 1), multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_process, args=(url, synchronous, g, count, ready,
                                                            cpu))
             for g in groups]  # fmt: skip
    for proc in procs:
        proc.start()
    waits: Counter[str] = Counter()
    stop = threading.Event()
    sampler = threading.Thread(target=sample_waits, args=(url, stop, waits))
    if server is not None:
        sampler.start()
    ready.wait(timeout=300)
    started, server_before = time.perf_counter(), server_cpu_s(server)
    client = sum(cpu.get(timeout=600) for _ in procs)
    wall = time.perf_counter() - started
    stop.set()
    for proc in procs:
        proc.join()
    if server is not None:
        sampler.join()
    require_captured(url, 8 * count)
    return {"per_s": round(8 * count / wall, 1), "wall_s": round(wall, 2),
            "client_cpu_s": round(client, 2),
            "server_cpu_s": round(server_cpu_s(server) - server_before, 2),
            "load_1min": os.getloadavg()[0],
            **({"server_backends": shares(waits)} if waits else {})}  # fmt: skip


def require_captured(url: str, expected: int) -> None:
    """The phase's store holds every turn its writers sent, and nothing else."""
    store = open_url(url, Path("unused.db"))
    try:
        held = int(store.stats(SCOPE)[Layer.L0.value]["records"])
    finally:
        store.close()
    if held != expected:
        raise NothingToMeasure(f"capture: {held} turns stored, {expected} sent")


#: What a PostgreSQL backend serving a writer is doing, from `pg_stat_activity`.
_BETWEEN = "idle: between transactions (the writer's side)"
_CLIENT = "idle in transaction: waiting for the writer's next statement"
_PIPELINE = "in a statement: waiting for the rest of the writer's pipeline"
_LOCK = "waiting for a lock"
_WAL = "writing or flushing WAL (commit)"
_RUNNING = "running (CPU)"


def sample_waits(url: str, stop: threading.Event, found: Counter[str]) -> None:
    """Every 10 ms until `stop`, what each backend of the writers is doing."""
    import psycopg  # noqa: PLC0415 - the postgres extra

    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.wait(0.01):
            rows = conn.execute(
                "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
            found.update(_doing(*row) for row in rows)


def _doing(state: str | None, kind: str | None, event: str | None) -> str:
    if state == "idle":
        return _BETWEEN
    if state == "idle in transaction":
        return _CLIENT
    if kind == "Lock":
        return _LOCK
    if event == "ClientRead":
        return _PIPELINE
    if kind == "IO" or (event or "").startswith("WAL"):
        return _WAL
    return _RUNNING if kind is None else f"{kind}: {event}"


def shares(found: Counter[str]) -> dict[str, float]:
    total = sum(found.values())
    return {doing: round(n / total, 3) for doing, n in found.most_common()}


def server_cpu_s(data_dir: Path | None) -> float:
    """CPU seconds used so far by a PostgreSQL server's processes (0 without one)."""
    if data_dir is None:
        return 0.0
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(entry.name) == postmaster:  # with its children's that ended (backends)
            ticks += sum(int(f) for f in fields[11:15])
        elif int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def recall(url: str | None, data: Path, cache: Path) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if url is not None:
        env["STRATAMEM_STORE_URL"] = url
    out = subprocess.run(
        [sys.executable, "-m", "stratamem", "eval", "locomo", "--data", str(data), "--json",
         "--embed-cache", str(cache)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(_recall_at_10(json.loads(out)))


def _recall_at_10(report: Any) -> float:
    """The first `recall_at_k` of the report (the overall one: it comes before the
    per-category blocks)."""
    if isinstance(report, dict):
        if "recall_at_k" in report:
            return float(report["recall_at_k"]["10"])
        values = list(report.values())
    elif isinstance(report, list):
        values = report
    else:
        values = []
    for value in values:
        if isinstance(value, dict | list):
            try:
                return _recall_at_10(value)
            except LookupError:
                continue
    raise LookupError("no recall_at_k in the report")


def searched(url: str | None, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    store = open_url(url, root / "search.db")
    try:
        return search_figures(store, args, analyze=url is not None)
    finally:
        store.close()


def ratios(figures: dict[str, Any]) -> dict[str, float]:
    pg, lite = figures["postgres"], figures["sqlite"]
    found = {}
    for processes in (1, 2):
        phase = f"capture_{processes}_process"
        for sqlite_level, label in (("", "sqlite"), ("_full", "sqlite_full")):
            found[f"{phase}_postgres_over_{label}"] = (
                pg[phase]["per_s"] / lite[phase + sqlite_level]["per_s"]
            )
    found["capture_postgres_2_over_1_process"] = (
        pg["capture_2_process"]["per_s"] / pg["capture_1_process"]["per_s"]
    )
    if "search" in pg:
        found["hybrid_p95_postgres_over_sqlite"] = (
            pg["search"]["hybrid"]["p95_ms"] / lite["search"]["hybrid"]["p95_ms"]
        )
    return {name: round(value, 2) for name, value in found.items()}


def fresh_database(server: Any, url: str | None, root: Path, name: str) -> str:
    """The URL of a new, empty database for one phase: a SQLite file, or a database of the
    PostgreSQL server (`url` names its default one)."""
    if url is None:
        return f"sqlite:{root / name}.db"
    server.psql(f"CREATE DATABASE {name};")
    return str(server.get_uri(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenant-rows", type=int, default=100_000)
    parser.add_argument("--total-rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--captures", type=int, default=400, help="turns per writer")
    parser.add_argument("--locomo", type=Path, default=None)
    parser.add_argument("--no-search", action="store_true", help="capture (and recall) only")
    args = parser.parse_args()
    import pgserver  # noqa: PLC0415 - the postgres extra

    root = Path(tempfile.mkdtemp(prefix="stratamem-bench-pg-"))
    server = pgserver.get_server(root / "pg", cleanup_mode="stop")
    try:
        pg_url = str(server.get_uri())
        figures: dict[str, Any] = {"tenant_rows": args.tenant_rows, "total_rows": args.total_rows}
        for kind, url in (("sqlite", None), ("postgres", pg_url)):
            figures[kind] = {} if args.no_search else {"search": searched(url, root, args)}
            for processes in (1, 2):
                for level in ("normal", "full") if url is None else ("",):
                    phase = f"capture_{processes}_process" + ("_full" if level == "full" else "")
                    figures[kind][phase] = capture_figures(
                        fresh_database(server, url, root, phase), level or "normal", processes,
                        args.captures, None if url is None else root / "pg",
                    )  # fmt: skip
            if args.locomo is not None:
                eval_url = None
                if url is not None:
                    server.psql("CREATE DATABASE locomo;")
                    eval_url = pg_url.replace("/postgres?", "/locomo?")
                figures[kind]["locomo_recall_at_10"] = recall(
                    eval_url, args.locomo, root / "embed.cache"
                )
        figures["ratios"] = ratios(figures)
        print(json.dumps(figures, indent=2))
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
