"""PostgreSQL store vs SQLite store, measured in the same run (issue 15's figures).

- search: p50/p95 of BM25 alone, the vector scan alone and both (the query vector given) over
  one tenant of `--tenant-rows` memories in a store of `--total-rows` memories (the other rows
  spread over 99 tenants), on each store. Vectors are random unit vectors of the local model's
  dimension (embedding a million texts would take hours here; it does not change a search's
  cost). Words are a Zipf-distributed vocabulary, as bench/store.py.
- capture: turns stored per second by 8 concurrent writers (each its own session), in one
  process (8 threads) and in two (4 threads each), on each store.
- recall: with `--locomo PATH`, `stratamem eval locomo` on each store (same embedder): R@10.

    python bench/postgres.py [--tenant-rows 100000] [--total-rows 1000000] [--queries 200]
                             [--captures 400] [--locomo locomo_dev.json]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Role, Scope, Turn
from stratamem.store.base import Filters
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


def search_figures(store: RecordStore, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    others = args.total_rows - args.tenant_rows
    started = time.perf_counter()
    fill(store, SCOPE.tenant, args.tenant_rows, rng)
    for t in range(99):
        fill(store, f"other{t}", others // 99, rng)
    store.search_text(SCOPE, Layer.L1, "warm", Filters(), 50)  # text index caught up
    fill_s = time.perf_counter() - started
    content = _ZIPF[100:] / _ZIPF[100:].sum()
    texts = [" ".join(rng.choice(WORDS[100:], size=4, p=content)) for _ in range(args.queries)]
    vectors = rng.normal(size=(args.queries, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

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


def _writer(url: str, path: str, name: str, count: int) -> None:
    store = open_url(url, Path(path))
    try:
        for i in range(count):
            store.add_turns(SCOPE, [Turn(f"{name}-{i}", SCOPE.tenant, name, Role.USER,
                                         f"message number {i} about the weather " * 3,
                                         1.7e9 + i)])  # fmt: skip
    finally:
        store.close()


def _process(url: str, path: str, names: list[str], count: int) -> None:
    threads = [threading.Thread(target=_writer, args=(url, path, n, count)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def capture_figures(url: str, path: Path, processes: int, count: int) -> float:
    """Turns stored per second by 8 writers in `processes` processes."""
    names = [f"w{processes}-{i}" for i in range(8)]
    groups = [names[i::processes] for i in range(processes)]
    started = time.perf_counter()
    procs = [multiprocessing.Process(target=_process, args=(url, str(path), g, count))
             for g in groups]  # fmt: skip
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return round(8 * count / (time.perf_counter() - started), 1)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenant-rows", type=int, default=100_000)
    parser.add_argument("--total-rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--captures", type=int, default=400, help="turns per writer")
    parser.add_argument("--locomo", type=Path, default=None)
    args = parser.parse_args()
    import pgserver  # noqa: PLC0415 - the postgres extra

    root = Path(tempfile.mkdtemp(prefix="stratamem-bench-pg-"))
    server = pgserver.get_server(root / "pg", cleanup_mode="stop")
    try:
        pg_url = str(server.get_uri())
        figures: dict[str, Any] = {"tenant_rows": args.tenant_rows, "total_rows": args.total_rows}
        for kind, url in (("sqlite", None), ("postgres", pg_url)):
            store = open_url(url, root / "search.db")
            try:
                figures[kind] = {"search": search_figures(store, args)}
            finally:
                store.close()
            for processes in (1, 2):
                capture_url = url or f"sqlite:{root / f'capture{processes}.db'}"
                figures[kind][f"capture_per_s_{processes}_process"] = capture_figures(
                    capture_url, root / "unused.db", processes, args.captures
                )
            if args.locomo is not None:
                eval_url = None
                if url is not None:
                    server.psql("CREATE DATABASE locomo;")
                    eval_url = pg_url.replace("/postgres?", "/locomo?")
                figures[kind]["locomo_recall_at_10"] = recall(
                    eval_url, args.locomo, root / "embed.cache"
                )
        figures["ratios_postgres_over_sqlite"] = {
            "hybrid_p95": round(figures["postgres"]["search"]["hybrid"]["p95_ms"]
                                / figures["sqlite"]["search"]["hybrid"]["p95_ms"], 2),
            "capture_2_process": round(figures["postgres"]["capture_per_s_2_process"]
                                       / figures["sqlite"]["capture_per_s_2_process"], 2),
        }  # fmt: skip
        print(json.dumps(figures, indent=2))
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
