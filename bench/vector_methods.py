"""Vector method benchmark: which nearest-neighbour scan the SQLite store should use.

Compares, in one run, at each size (random unit vectors of dimension 384; the cost of a scan
does not depend on the values):
- `numpy_exact`: the in-memory exact scan (float32 matrix @ query, argpartition);
- `numpy_signbits`: sign-bit Hamming first pass + exact re-scoring (what `VectorCache` does
  above `EXACT_MAX`);
- `sqlite_vec`: sqlite-vec's `vec0` virtual table KNN query through apsw (an exact scan in C).
With `--locomo PATH`, it also embeds the LoCoMo turns and questions with the local model and
reports how often the sign-bit pass returns the exact scan's top 10 (agreement@10).

    python bench/vector_methods.py [--sizes 1000,10000,100000] [--queries 100] [--locomo PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from stratamem.datasets import locomo
from stratamem.embed import LocalEmbedder
from stratamem.store.core.vectors import VectorCache

DIM = 384


def unit_rows(count: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def cache_of(vectors: np.ndarray, exact_max: int) -> VectorCache:
    cache = VectorCache(dim=vectors.shape[1], exact_max=exact_max)
    cache.add(list(range(1, len(vectors) + 1)), [v.tobytes() for v in vectors], len(vectors))
    return cache


def timed(fn: Callable[[np.ndarray], Any], queries: np.ndarray) -> dict[str, float]:
    fn(queries[0])
    samples = []
    for query in queries:
        start = time.perf_counter()
        fn(query)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[int(0.95 * (len(samples) - 1))], 3),
    }


def sqlite_vec_search(vectors: np.ndarray) -> Callable[[np.ndarray], Any]:
    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    conn.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{DIM}])")
    with conn:
        conn.executemany(
            "INSERT INTO v (rowid, embedding) VALUES (?, ?)",
            ((i + 1, row.tobytes()) for i, row in enumerate(vectors)),
        )

    def search(query: np.ndarray) -> Any:
        return list(
            conn.execute(
                "SELECT rowid, distance FROM v WHERE embedding MATCH ? AND k = 50",
                (query.tobytes(),),
            )
        )

    return search


def speed(sizes: list[int], query_count: int) -> list[dict[str, Any]]:
    queries = unit_rows(query_count, seed=99)
    results = []
    for size in sizes:
        vectors = unit_rows(size, seed=size)
        exact = cache_of(vectors, exact_max=10**9)
        signbits = cache_of(vectors, exact_max=0)
        row = {
            "records": size,
            "numpy_exact": timed(lambda q, c=exact: c.top(q, 50), queries),
            "numpy_signbits": timed(lambda q, c=signbits: c.top(q, 50), queries),
            "sqlite_vec": timed(sqlite_vec_search(vectors), queries),
        }
        row["memory_mb"] = {
            "float32": round(vectors.nbytes / 2**20, 1),
            "signbits": round(signbits.codes[: signbits.size].nbytes / 2**20, 2),
        }
        results.append(row)
    return results


def agreement_on_locomo(path: str) -> dict[str, Any]:
    samples = locomo.load(Path(path))
    turns = [m["text"] for s in samples for msgs in s.sessions.values() for m in msgs]
    questions = [q.question for s in samples for q in s.questions]
    embedder = LocalEmbedder()
    vectors = asyncio.run(embedder.embed(turns))
    queries = asyncio.run(embedder.embed(questions))
    exact, signbits = cache_of(vectors, 10**9), cache_of(vectors, 0)
    overlaps = []
    for query in queries:
        truth = {rid for rid, _ in exact.top(query, 10)}
        overlaps.append(len(truth & {rid for rid, _ in signbits.top(query, 10)}) / 10)
    return {
        "turns": len(turns),
        "questions": len(questions),
        "agreement_at_10": round(float(np.mean(overlaps)), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--locomo", default=None, help="LoCoMo JSON for the agreement figure")
    args = parser.parse_args()
    report: dict[str, Any] = {"speed": speed([int(s) for s in args.sizes.split(",")], args.queries)}
    if args.locomo:
        report["signbits_vs_exact"] = agreement_on_locomo(args.locomo)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
