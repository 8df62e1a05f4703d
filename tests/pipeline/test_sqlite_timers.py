"""The SQLite backend's timers: one unreadable row (a damaged body, a task type this version does
not know) used to fail every pump, so no timer of any tenant fired again."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task, TaskType


async def test_an_unreadable_timer_is_set_aside_and_the_others_fire(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "pipeline.db"
    backend = SqliteBackend(path)
    try:
        first, last = Task(TaskType.L2, "t", "a"), Task(TaskType.L2, "t", "b")
        await backend.set_timer("l2/t/a", first, due_at=10)
        await backend.set_timer("l2/t/b", last, due_at=30)
        raw = sqlite3.connect(path)
        with raw:
            raw.executemany(
                "INSERT INTO timers (key, due_at, body) VALUES (?, ?, ?)",
                [("newer/t", 20, '{"type": "L9", "tenant": "t"}'), ("damaged/t", 25, "{not json")],
            )
        with caplog.at_level(logging.ERROR, logger="stratamem.pipeline.sqlite_core"):
            fired = await backend.fire_due_timers(now=100, limit=10)
        assert [t.id for t in fired] == [first.id, last.id]
        assert (await backend.depth()).timers == 0
        aside = raw.execute("SELECT key, error FROM unreadable_timers ORDER BY due_at").fetchall()
        assert [key for key, _ in aside] == ["newer/t", "damaged/t"]
        assert "unknown task type 'L9'" in aside[0][1]
        assert sorted(r.getMessage().split()[1] for r in caplog.records) == [
            "'damaged/t'", "'newer/t'"
        ]
        raw.close()
    finally:
        await backend.close()
