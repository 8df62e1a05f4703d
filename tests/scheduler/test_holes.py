"""Holes of the scheduling fragments the backlog scheduler replaced, each shown on the store and
backend the service uses (the layers' and offload's holes are in their own test modules)."""

from __future__ import annotations

import math
from pathlib import Path

from stratamem.domain import Role, Scope, Turn
from stratamem.layers.backlog import L1Source
from stratamem.layers.settings import LayerSettings
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.sqlite import SqliteStore

NOW = 1_800_000_000.0
YEAR_S = 365 * 86400.0


async def test_imported_history_never_stalls_a_fresh_session(tmp_path: Path) -> None:
    """500 sessions imported with their original (years old) timestamps: the old scan took the
    500 oldest sessions, all past the 7-day idle window, and nothing else, ever. Now every owed
    session is submitted once within one sweep, the fresh one included, and the old ones too."""
    store = SqliteStore(tmp_path / "db.sqlite")
    backend = SqliteBackend(tmp_path / "pipeline.db")
    for i in range(500):
        store.add_turns(Scope("archive"), [Turn(f"a{i}", "archive", f"old-{i:03}", Role.USER,
                                                "an old message", NOW - YEAR_S)])  # fmt: skip
    store.add_turns(Scope("zeta"), [Turn("f", "zeta", "fresh", Role.USER, "hi", NOW - 1)])
    settings = PipelineSettings(scheduler_limit=8)
    scheduler = BacklogScheduler(backend, [L1Source(SqlBacklogStore(store), LayerSettings())],
                                 settings)  # fmt: skip
    submitted: list[tuple[str, str | None]] = []
    for _ in range(math.ceil(501 / 8)):
        submitted += [(t.tenant, t.session) for t in (await scheduler.run_pass(NOW)).submitted]
        for delivery in await backend.consume("w", count=100, block_ms=0, now=NOW):
            await backend.ack(delivery)  # worked on elsewhere: the queue has room again
    assert ("zeta", "fresh") in submitted
    assert len(submitted) == len(set(submitted)) == 501
    await backend.close()
    store.close()
