"""A new SQLite store and pipeline file opened by several processes at once (serve and its
workers starting together on an empty data directory): every one of them opens them, none fails
with "database is locked" (switching a new file to WAL takes a lock SQLite does not wait for by
itself)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from stratamem.pipeline.sqlite_core import connect
from stratamem.store.opening import open_url

PROCESSES = 5
ROUNDS = 4


def _open(path: str, start: Any, failed: Any) -> None:
    start.wait(timeout=60)
    try:
        open_url(f"sqlite:{path}", Path(path)).close()
        connect(Path(path).with_suffix(".pipeline")).close()
    except Exception as exc:  # noqa: BLE001 - reported to the test through the queue
        failed.put(repr(exc))


def test_processes_opening_a_new_store_together_all_open_it(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    failed = context.Queue()
    for n in range(ROUNDS):
        path = str(tmp_path / f"store{n}.db")
        start = context.Barrier(PROCESSES)
        procs = [context.Process(target=_open, args=(path, start, failed))
                 for _ in range(PROCESSES)]  # fmt: skip
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=120)
        assert [proc.exitcode for proc in procs] == [0] * PROCESSES
        store = open_url(f"sqlite:{path}", Path(path))
        store.close()
    errors = []
    while not failed.empty():
        errors.append(failed.get())
    assert errors == []
