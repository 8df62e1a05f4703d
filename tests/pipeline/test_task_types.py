"""The task types as the parts declare them (`layers.task_types`, `offload.task_types`) and the
pipeline reads them (`pipeline.task_type`, through the one table `stratamem.task_types`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratamem.layers.task_types import FLUSH, L1, L2, L3
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L2
from stratamem.pipeline.errors import UnknownTaskType
from stratamem.pipeline.settings import LockScope
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.pipeline.task_type import (
    LockRule,
    Scope,
    SessionTimer,
    TaskType,
    TaskTypes,
    registered,
    task_type,
)
from stratamem.pipeline.timers import lock_key_for, session_timer_keys

NOW = 1_000_000.0
SRC = Path(__file__).parent.parent.parent / "src"

#: The keys as the pipeline named them before the parts declared their types: locks and timers
#: outlive a process (Redis, pipeline.db), so a rule that spelt one differently would leave a
#: held lock or an armed timer behind an upgrade.
LOCKS = {
    (LockScope.SESSION, "L1"): "session/t/s",
    (LockScope.SESSION, "flush"): "session/t/s",
    (LockScope.SESSION, "L2"): "l2/t",
    (LockScope.SESSION, "L3"): "tenant/t",
    (LockScope.SESSION, "offload-l1"): None,
    (LockScope.SESSION, "offload-l15"): None,
    (LockScope.SESSION, "offload-l2"): "diagram/t/s",
    (LockScope.TENANT, "L1"): "tenant/t",
    (LockScope.TENANT, "flush"): "tenant/t",
    (LockScope.TENANT, "L2"): "tenant/t",
    (LockScope.TENANT, "L3"): "tenant/t",
    (LockScope.TENANT, "offload-l1"): None,
    (LockScope.TENANT, "offload-l15"): None,
    (LockScope.TENANT, "offload-l2"): "diagram/t/s",
}


def test_every_type_locks_and_times_as_before() -> None:
    found = {(scope, t.name): lock_key_for(Task(t, "t", "s"), scope)
             for scope in LockScope for t in registered()}  # fmt: skip
    assert found == LOCKS
    timers = ["l2/t/s", "l2max/t/s", "offload-l1/t/s", "offload-l2/t/s"]
    assert session_timer_keys("t", "s") == timers


def test_a_task_is_of_the_registered_type_whatever_names_it() -> None:
    assert Task("L2", "t").type is L2
    assert Task(TaskType("L1", Scope.TENANT, None), "t", "s").type is L1  # the declared one
    assert Task.from_json(Task(OFFLOAD_L2, "t", "s").to_json()).type is OFFLOAD_L2
    assert task_type("flush") is FLUSH and sorted([L3, L1, FLUSH]) == [L1, L3, FLUSH]
    with pytest.raises(UnknownTaskType, match="unknown task type 'L9'"):
        Task("L9", "t", "s")


def test_a_type_of_sessions_needs_a_session_and_one_of_tenants_does_not() -> None:
    assert Task(L3, "t").session is None and Task(L2, "t").session is None
    for needs in (L1, FLUSH, OFFLOAD_L1):
        with pytest.raises(ValueError, match="needs a session"):
            Task(needs, "t")


def test_a_table_refuses_a_name_or_a_timer_declared_twice() -> None:
    timer = SessionTimer("x")
    one = TaskType("a", Scope.SESSION, LockRule(Scope.SESSION), (timer,))
    with pytest.raises(ValueError, match="declared twice"):
        TaskTypes([one, TaskType("a", Scope.TENANT, None)])
    with pytest.raises(ValueError, match="declared twice"):
        TaskTypes([one, TaskType("b", Scope.SESSION, None, (timer,))])


#: Run in a fresh interpreter that imports the pipeline and nothing of the parts by itself.
_READER = """
import asyncio, pathlib, sys
from stratamem.pipeline.sqlite_backend import SqliteBackend

async def main():
    backend = SqliteBackend(pathlib.Path(sys.argv[1]))
    try:
        queued = [t.type.name for t in await backend.list_tasks(limit=100)]
        depth = await backend.depth()
        fired = [t.type.name for t in await backend.fire_due_timers(now={now}, limit=100)]
    finally:
        await backend.close()
    print(" ".join(queued)); print(" ".join(fired))
    print(" ".join(sorted(t.name for t, n in depth.queued.items() if n)))
    print(" ".join(m for m in sys.modules if m.startswith(("stratamem.layers", "stratamem.off"))))

asyncio.run(main())
"""


async def test_a_process_that_imports_only_the_pipeline_reads_every_type(tmp_path: Path) -> None:
    """Tasks and timers of every type, written here, are read, counted and fired by a process
    that imported only a backend: the table is complete without the parts' executors, and it
    loads their declarations only."""
    backend = SqliteBackend(tmp_path / "pipeline.db")
    try:
        for t in registered():
            task = Task(t, "t", "s")
            await backend.enqueue(task, now=NOW)
            await backend.set_timer(f"test/{t.name}", task, due_at=NOW - 1)
    finally:
        await backend.close()
    code = textwrap.dedent(_READER).replace("{now}", repr(NOW))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pipeline.db")], env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    queued, fired, counted, loaded = out.split("\n")[:4]
    names = registered().names()
    assert queued.split() == names and sorted(fired.split()) == sorted(names)
    assert counted.split() == sorted(names)
    assert sorted(loaded.split()) == ["stratamem.layers", "stratamem.layers.task_types",
                                      "stratamem.offload", "stratamem.offload.task_types"]
