"""Every bench runs once at a tiny size and prints figures of something it measured, so a rename
or a changed signature in the library cannot break a bench silently (bench/pg_scale.py once
crashed at HEAD for weeks, and the next run measured an empty PostgreSQL). The figures here mean
nothing: sizes are chosen to finish in seconds; what is asserted is that the script ran to the
end and that what it reports was measured (counts above zero, a JSON object where it prints one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
Check = Callable[[Any], bool]


def _runs(figures: Any) -> bool:
    first = figures["runs"][0]  # the scheduled run; the others compare schedules
    return bool(first["usage"]["L1"]["calls"] > 0 and first["memories"] > 0)


def _store(figures: Any) -> bool:
    return all(row["bm25_only"]["p50_ms"] > 0 for row in figures["search"])


CASES: list[tuple[str, list[str], Check | None]] = [
    ("compaction.py", ["--tasks", "2"], None),
    ("drain.py", ["--processes", "1", "--sessions", "24", "--seconds", "1", "--json"], None),
    ("l1_failures.py", ["--turns", "10"], None),
    ("layers_cost.py", ["--turns", "10"], _runs),
    ("pipeline.py", ["--backend", "sqlite", "--tasks", "20", "--workers", "2", "--json"],
     lambda f: f["tasks_per_s"] > 0 and f["baseline"]["tasks_per_s"] > 0),
    ("pipeline.py", ["--backend", "redis", "--tasks", "20", "--workers", "2", "--json"],
     lambda f: f["tasks_per_s"] > 0),
    ("pipeline_status.py", ["--sessions", "20", "--repeat", "1"],
     lambda f: f["aggregated_ms"] > 0),
    ("retention.py", ["--rows", "200", "--json"], lambda f: f["batched"]["passes"] > 0),
    ("scheduler.py", ["--sessions", "200", "--owed", "10", "--repeat", "1", "--json"],
     lambda f: f["pass_all_owed"]["submitted"] == 10),
    ("store.py", ["--sizes", "200", "--queries", "5", "--captures", "20", "--no-model"], _store),
    ("vector_methods.py", ["--sizes", "200", "--queries", "5"],
     lambda f: f["speed"][0]["records"] == 200),
    ("startup.py", ["--specs", "none", "--repeat", "1", "--json"], None),
    ("proxy_latency.py", ["--calls", "3", "--turns", "10", "--embedder", "hash:64", "--json"],
     None),
    ("load.py", ["--seconds", "2", "--clients", "2", "--tenants", "2", "--import-messages", "10",
                 "--embedder", "hash:64"], None),
    ("load.py", ["--rate", "20", "--seconds", "2", "--clients", "4", "--tenants", "2",
                 "--runs", "baseline", "--embedder", "hash:64"], None),
    ("soak.py", ["--seconds", "3", "--clients", "2", "--drain-s", "30", "--embedder",
                 "hash:64"], None),
    ("idle_connections.py", ["--connections", "5", "--probes", "3"], None),
    ("pg_vector_plan.py", ["--rows", "50", "--tenants", "2", "--queries", "5", "--json"], None),
    ("pg_scale.py", ["--tenant-rows", "500", "--total-rows", "1000", "--queries", "5"],
     lambda f: f["postgres"]["large_tenant"]["recall_at_10_vs_exact"] > 0),
    ("postgres.py", ["--tenant-rows", "500", "--total-rows", "1000", "--queries", "5",
                     "--captures", "10"], None),
]
PARALLEL = 3
NEEDS = {"redis": "redis", "pg_": "postgres", "postgres.py": "postgres"}


def _params() -> list[Any]:
    params = []
    for script, args, check in CASES:
        marks = [pytest.mark.slow]
        marks += [getattr(pytest.mark, m) for key, m in NEEDS.items() if key in script + str(args)]
        params.append(pytest.param(script, args, check, marks=marks, id=f"{script}:{args[1]}"))
    return params


def _figures(stdout: str) -> Any:
    """The JSON object the bench printed (the whole output, or its last line), or None."""
    for text in (stdout, stdout.strip().splitlines()[-1] if stdout.strip() else ""):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            continue
    return None


def _run(script: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    # A short temporary directory: pgserver's socket path must fit a Unix socket's 107 bytes.
    with tempfile.TemporaryDirectory(prefix="smoke-", dir="/tmp") as tmp:
        env = {**os.environ, "TMPDIR": tmp, "PYTHONPATH": str(ROOT / "src")}
        if script == "pg_scale.py":
            args = [*args, "--cache", f"{tmp}/pg-scale", "--shared-buffers", "128MB"]
        return subprocess.run(
            [sys.executable, str(ROOT / "bench" / script), *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Any]]]:
    """Every collected bench started at once, PARALLEL at a time: most of a tiny bench's time is
    a process starting and waiting (for serve, an idle timeout, a drain), so running them side
    by side keeps the suite's wall time down; each test then waits for its own."""
    wanted = [item.callspec.id for item in request.session.items
              if item.originalname == "test_bench_runs_at_a_tiny_size"]  # fmt: skip
    with ThreadPoolExecutor(PARALLEL) as pool:
        yield {f"{script}:{args[1]}": pool.submit(_run, script, args) for script, args, _ in CASES
               if f"{script}:{args[1]}" in wanted}  # fmt: skip


@pytest.mark.parametrize(("script", "args", "check"), _params())
def test_bench_runs_at_a_tiny_size(
    script: str, args: list[str], check: Check | None, runs: dict[str, Future[Any]]
) -> None:
    done = runs[f"{script}:{args[1]}"].result()
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{script} printed no figures"
    figures = _figures(done.stdout)
    if check is not None:
        assert figures is not None, f"{script} printed no JSON:\n{done.stdout[-2000:]}"
        assert check(figures), f"{script}'s figures measured nothing:\n{done.stdout[-2000:]}"
