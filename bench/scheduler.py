"""Backlog scheduler benchmark: one pass over 100k sessions of which 1k owe L1.

A SQLite store with `--sessions` sessions of one turn each (spread over 100 tenants); all but
`--owed` are caught up (their cursor at their last turn). Measured, each repeated `--repeat`
times with a fresh scheduler and an empty queue, reporting the median time (runs without
tracemalloc, which slows allocation-heavy code several times) and the peak memory of one more
run under tracemalloc:

- `pass_all_owed`: one pass whose budget covers every owed session (`scheduler_limit` =
  `--owed`): it reads the owed sessions, page by page, and submits them all;
- `pass_default`: one pass with the default budget (`scheduler_limit` = 8);
- `discovery`: the L1 source paged through to its end (page size `4 * --owed`) with nothing
  submitted: the store's share of a pass (a submission is one enqueue on the backend);
- baseline in the same run, `old_scan`: the query the old layer scheduler ran each second
  (every session grouped from the turns table, the 500 oldest with pending turns).

    python bench/scheduler.py [--sessions 100000] [--owed 1000] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stratamem.domain import Role, Scope, Turn
from stratamem.layers.backlog import layer_sources
from stratamem.layers.settings import LayerSettings
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.sqlite import SqliteStore

TENANTS = 100
OLD_SCAN = (
    "SELECT t.tenant, t.session, MAX(t.seq) AS last_seq, MAX(t.ts) AS last_turn_at,"
    " s.cursor_seq FROM turns t LEFT JOIN layer_sessions s ON s.tenant = t.tenant"
    " AND s.session = t.session GROUP BY t.tenant, t.session"
    " HAVING MAX(t.seq) > COALESCE(s.cursor_seq, 0) ORDER BY last_turn_at LIMIT 500"
)


def fill(store: SqliteStore, sessions: int, owed: int) -> None:
    """`sessions` sessions with one turn each; every `sessions // owed`-th one is owed."""
    per_tenant = sessions // TENANTS
    for t in range(TENANTS):
        tenant = f"t{t:03}"
        store.add_turns(Scope(tenant), [
            Turn(f"u{i}", tenant, f"s{i:06}", Role.USER, "hello there", 1_000.0 + i)
            for i in range(per_tenant)])  # fmt: skip
    step = sessions // owed
    with store.writing() as conn:  # the caught-up ones: their cursor at their turn
        conn.execute(
            "INSERT INTO layer_sessions (tenant, session, cursor_seq, l1_runs)"
            " SELECT tenant, session, last_seq, 1 FROM session_heads"
            " WHERE (CAST(substr(session, 2) AS INTEGER) + CAST(substr(tenant, 2) AS INTEGER))"
            " % ? != 0",
            (step,),
        )


async def one_pass(
    store: SqliteStore, backend: SqliteBackend, limit: int, traced: bool = False
) -> dict[str, Any]:
    settings = PipelineSettings(scheduler_limit=limit, scheduler_pages_per_pass=1000)
    sources = layer_sources(SqlBacklogStore(store), LayerSettings(), settings.scheduler_grace_s)
    scheduler = BacklogScheduler(backend, sources[:1], settings)  # the L1 source
    with measured(traced) as figures:
        report = await scheduler.run_pass(2_000_000_000.0)
    for delivery in await backend.consume("bench", count=10**6, block_ms=0, now=0.0):
        await backend.ack(delivery)
    return {**figures, "submitted": len(report.submitted)}


@contextlib.contextmanager
def measured(traced: bool) -> Iterator[dict[str, float]]:
    """Fills in `s` (wall time) and, when `traced`, `peak_kib` (tracemalloc's peak)."""
    figures: dict[str, float] = {}
    if traced:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        yield figures
    finally:
        figures["s"] = time.perf_counter() - start
        if traced:
            figures["peak_kib"] = tracemalloc.get_traced_memory()[1] / 1024
            tracemalloc.stop()


async def discovery(store: SqliteStore, page_size: int, traced: bool = False) -> dict[str, Any]:
    [source] = layer_sources(SqlBacklogStore(store), LayerSettings(), 60.0)[:1]
    after, found = None, 0
    with measured(traced) as figures:
        while True:
            page = await source.page(after, page_size, 0.0)
            found += len(page.items)
            if page.next_after is None:
                break
            after = page.next_after
    return {**figures, "found": found}


def old_scan(store: SqliteStore) -> dict[str, Any]:
    start = time.perf_counter()
    with store.reading() as conn:
        rows = conn.execute(OLD_SCAN).fetchall()
    return {"s": time.perf_counter() - start, "rows": len(rows)}


def median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


async def main(sessions: int, owed: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "db.sqlite")
        backend = SqliteBackend(Path(tmp) / "pipeline.db")
        start = time.perf_counter()
        fill(store, sessions, owed)
        setup_s = time.perf_counter() - start
        all_owed = [await one_pass(store, backend, owed) for _ in range(repeat)]
        default = [await one_pass(store, backend, 8) for _ in range(repeat)]
        found = [await discovery(store, 4 * owed) for _ in range(repeat)]
        peaks = {"pass_all_owed": (await one_pass(store, backend, owed, True))["peak_kib"],
                 "pass_default": (await one_pass(store, backend, 8, True))["peak_kib"],
                 "discovery": (await discovery(store, 4 * owed, True))["peak_kib"]}  # fmt: skip
        baseline = [old_scan(store) for _ in range(repeat)]
        await backend.close()
        store.close()
    figures = {
        "sessions": sessions, "owed": owed, "setup_s": round(setup_s, 1),
        "pass_all_owed": {"median_ms": round(1000 * median(all_owed, "s"), 1),
                          "peak_kib": round(peaks["pass_all_owed"], 1),
                          "submitted": all_owed[0]["submitted"]},
        "pass_default": {"median_ms": round(1000 * median(default, "s"), 1),
                         "peak_kib": round(peaks["pass_default"], 1),
                         "submitted": default[0]["submitted"]},
        "discovery": {"median_ms": round(1000 * median(found, "s"), 1),
                      "peak_kib": round(peaks["discovery"], 1), "found": found[0]["found"]},
        "old_scan": {"median_ms": round(1000 * median(baseline, "s"), 1),
                     "rows": baseline[0]["rows"]},
    }  # fmt: skip
    figures["old_scan_over_discovery"] = round(
        figures["old_scan"]["median_ms"] / max(figures["discovery"]["median_ms"], 1e-3), 1
    )
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--owed", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    result = asyncio.run(main(args.sessions, args.owed, args.repeat))
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name}: {value}")
