"""Chaos on both backends: real `stratamem worker` processes (every task type, each running the
backlog scheduler under the kinds' leases) are killed, paused past the lock TTL and restarted at
random while 20 sessions of 3 tenants receive turns and tool results; midway the whole queue is
wiped (the Redis stream, or the SQLite task table). A split deployment runs too: a layers-only
worker, an offload-only worker, `stratamem schedule` and `serve --workers 0`, started in random
order, each killed and restarted at random (issue 24: with one scheduler lease for the
deployment, a process without the L1 source could hold it and L1 stalled for good). At the end
nothing owed is left: every turn is covered by L1, every memory consolidated by L2, every
tenant's profile newer than its last scene change, every tool result summarised, judged and
mapped to a diagram node; no turn was extracted twice; and the LLM was called no more often
than tasks were executed.

Overlap and the LLM bound are judged from what the system records, the execution log of the
store (`stratamem.store.evidence.executions`), which every worker writes when an execution
starts and ends: no two executions of one task, and no two under one lock (session, tenant,
diagram), had windows that overlapped; every commit lies inside its execution's window; tokens
grow in the order executions started; only killed workers left an execution open. The LLM calls of
each stage, counted on the scripted endpoint, are at most the executions of its task type
(every task, retry and redelivery that started, a killed worker's included); offload-l2,
which asks once per task diagram of its session, at most that many times its executions;
offload-l15, which asks again when a conflict changed what it was shown, at most
`cas_attempts` times its executions.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from stratamem.clock import SystemClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.offload import Offload, OffloadSettings, ToolPair
from stratamem.offload.executors import PipelineScheduler
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.store.evidence.executions import Execution
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.testing import ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

from ..offload import model
from ..pipeline.test_crash import wait_until

pytestmark = pytest.mark.slow
T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/0"
TENANTS = ["acme", "globex", "initech"]
SESSIONS = [(TENANTS[i % 3], f"s{i:02}") for i in range(20)]
ROUNDS = 6
SPLIT_ROUNDS = 4
WORKERS = 3
CONCURRENCY = 2
LOCK_TTL_S = 1.0
DEADLINE_S = 120.0

ENV = {
    "STRATAMEM_EMBEDDER": "hash:64",
    "STRATAMEM_BACKGROUND_EMBEDDING": "false",
    "STRATAMEM_LLM_MODEL": "scripted-chat",
    "STRATAMEM_LLM_TIMEOUT_S": "10",
    "STRATAMEM_PIPELINE_CONCURRENCY": str(CONCURRENCY),
    "STRATAMEM_PIPELINE_LOCK_TTL_MS": str(int(LOCK_TTL_S * 1000)),
    "STRATAMEM_PIPELINE_LOCK_WAIT_MAX_S": "2",
    "STRATAMEM_PIPELINE_LOCK_BACKOFF_INITIAL_S": "0.02",
    "STRATAMEM_PIPELINE_LOCK_BACKOFF_CAP_S": "0.1",
    "STRATAMEM_PIPELINE_RECLAIM_IDLE_MS": "1500",
    "STRATAMEM_PIPELINE_RECLAIM_INTERVAL_S": "0.2",
    "STRATAMEM_PIPELINE_MAX_DELIVERIES": "20",
    "STRATAMEM_PIPELINE_RETRY_LIMIT": "5",
    "STRATAMEM_PIPELINE_RETRY_BACKOFF_BASE_S": "0.05",
    "STRATAMEM_PIPELINE_RETRY_BACKOFF_FACTOR": "2",
    "STRATAMEM_PIPELINE_PUMP_INTERVAL_S": "0.05",
    "STRATAMEM_PIPELINE_CONSUME_BLOCK_MS": "100",
    "STRATAMEM_PIPELINE_GRACE_PERIOD_S": "1",
    "STRATAMEM_PIPELINE_L2_DELAY_S": "0.3",
    "STRATAMEM_PIPELINE_SCHEDULER_LIMIT": "16",
    "STRATAMEM_PIPELINE_SCHEDULER_INTERVAL_S": "0.2",
    "STRATAMEM_PIPELINE_SCHEDULER_LEASE_MS": "1000",
    "STRATAMEM_PIPELINE_SCHEDULER_GRACE_S": "1",
    "STRATAMEM_PIPELINE_SCHEDULER_IN_FLIGHT_S": "3",
    "STRATAMEM_PIPELINE_SCHEDULER_BACKOFF_INITIAL_S": "0.5",
    "STRATAMEM_PIPELINE_SCHEDULER_BACKOFF_CAP_S": "2",
    "STRATAMEM_PIPELINE_SCHEDULER_PARK_REFRESH_S": "1",
    "STRATAMEM_LAYERS_L1_EVERY_TURNS": "4",
    "STRATAMEM_LAYERS_IDLE_TIMEOUT_S": "0.5",
    "STRATAMEM_LAYERS_MAX_BATCH_TURNS": "6",
    "STRATAMEM_LAYERS_L2_DELAY_S": "0.3",
    "STRATAMEM_LAYERS_L2_MIN_INTERVAL_S": "0.3",
    "STRATAMEM_LAYERS_CATCH_UP_QUIET_S": "0.5",
    "STRATAMEM_OFFLOAD_L1_DELAY_S": "0.3",
    "STRATAMEM_OFFLOAD_DIAGRAM_DELAY_S": "0.3",
    "STRATAMEM_OFFLOAD_ORPHAN_MAX_AGE_S": "5",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ROLES: dict[str, Callable[[int], list[str]]] = {
    "worker": lambda n: ["worker", "--name", f"w{n}"],
    "layers": lambda n: ["worker", "--name", f"w{n}",
                         "--executors", "stratamem.runtime:layer_registry"],
    "offload": lambda n: ["worker", "--name", f"w{n}",
                          "--executors", "stratamem.runtime:offload_registry"],
    "schedule": lambda n: ["schedule"],
    "serve": lambda n: ["serve", "--workers", "0", "--port", str(free_port())],
}  # fmt: skip
"""The command of each kind of process: a worker of every task type, a split deployment's."""
SPLIT = ["layers", "offload", "schedule", "serve"]


class Cluster:
    """Worker processes over one data directory and pipeline, a producer in this process."""

    def __init__(self, kind: str, tmp_path: Path, llm: ScriptedLLM) -> None:
        self.kind, self.tmp_path = kind, tmp_path
        prefix = f"test:chaos:{uuid.uuid4().hex}:"
        data = tmp_path / "data"
        self.env = {
            **os.environ, **ENV,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
            "STRATAMEM_DATA_DIR": str(data),
            "STRATAMEM_LLM_BASE_URL": llm.base_url,
            "STRATAMEM_PIPELINE_BACKEND": kind,
            "STRATAMEM_PIPELINE_REDIS_URL": REDIS_URL,
            "STRATAMEM_PIPELINE_REDIS_PREFIX": prefix,
        }  # fmt: skip
        self.loop = asyncio.new_event_loop()
        self.backend: PipelineBackend = (
            RedisBackend(REDIS_URL, prefix=prefix) if kind == "redis"
            else SqliteBackend(data / "pipeline.db")
        )  # fmt: skip
        settings = Settings(data_dir=data, embedder="hash:64", background_embedding=False)
        self.memory = AsyncMemory.open(settings, llm=None)
        store = SqlOffloadStore(self.memory.store)  # type: ignore[arg-type]
        self.offload = Offload(store, PipelineScheduler(self.backend, SystemClock()))
        self.offload_store = store
        self.procs: list[subprocess.Popen[bytes]] = []
        self.roles: list[str] = []  # of each process, in `ROLES`
        self.killed: set[str] = set()  # names of the workers killed

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def spawn(self, role: str = "worker") -> None:
        """Start a process of `role` (see `ROLES`)."""
        n = len(self.procs)
        code = "from stratamem.cli.main import main; main()"
        args = ROLES[role](n)
        with (self.tmp_path / f"{role}{n}.log").open("wb") as log:
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", code, *args],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            ))  # fmt: skip
        self.roles.append(role)

    def live_roles(self) -> set[str]:
        return {role for role, p in zip(self.roles, self.procs, strict=True) if p.poll() is None}

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def stop(self) -> None:
        """Stop the live workers gracefully (their running executions end, as cancelled)."""
        for proc in self.live():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(timeout=60)

    def wipe_queue(self) -> None:
        """The whole queue is lost: the Redis stream (and its group), or the task table."""
        if isinstance(self.backend, RedisBackend):
            self.call(wipe_streams(self.backend))
            return
        import sqlite3  # noqa: PLC0415

        with sqlite3.connect(self.tmp_path / "data" / "pipeline.db", timeout=10) as conn:
            conn.execute("DELETE FROM tasks")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
        self.call(self.memory.aclose())
        if isinstance(self.backend, RedisBackend):
            self.call(self.backend.drop_all())
        self.call(self.backend.close())
        self.loop.close()


async def wipe_streams(backend: RedisBackend) -> None:
    """Every task stream (one per type) with its consumer group, as a restart loses them."""
    async for key in backend._redis.scan_iter(match=f"{backend.keys.tasks_prefix}*"):
        await backend._redis.delete(key)


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, scripted_llm: ScriptedLLM
) -> Iterator[Cluster]:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l15", lambda request: model.judgment("Fix the build"))
    scripted_llm.on("offload-l2", model.diagram)
    made = Cluster(request.param, tmp_path, scripted_llm)
    try:
        yield made
    finally:
        made.close()


def produce(cluster: Cluster, round_no: int, rng: random.Random) -> None:
    """One round: every session gets turns, some a user message and tool results."""
    now = time.time()
    for tenant, session in SESSIONS:
        turns = [{"role": "user", "speaker": "Maria",
                  "text": f"In round {round_no} I visited city {session}-{i}."}
                 for i in range(rng.randint(1, 3))]  # fmt: skip
        cluster.call(cluster.memory.capture(tenant, session, turns))
        if rng.random() < 0.5:
            continue
        cluster.call(cluster.offload.user_message(tenant, session, f"Fix build {round_no}",
                                                  timestamp=now))  # fmt: skip
        pairs = [ToolPair(f"r{round_no}c{i}", "grep", {}, f"hit {i}\n" * 20, now + 0.001 * i)
                 for i in range(rng.randint(1, 3))]  # fmt: skip
        cluster.call(cluster.offload.ingest(tenant, session, pairs))


def fault(cluster: Cluster, rng: random.Random) -> None:
    """Kill a worker and start another, or pause one past the lock TTL."""
    live = cluster.live()
    if not live:
        cluster.spawn()
        return
    victim = rng.choice(live)
    if rng.random() < 0.5:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        cluster.killed.add(f"w{cluster.procs.index(victim)}")
        cluster.spawn()
        return
    victim.send_signal(signal.SIGSTOP)
    time.sleep(1.5 * LOCK_TTL_S)  # the fault itself: a pause past the lock TTL
    victim.send_signal(signal.SIGCONT)


def owed(cluster: Cluster) -> dict[str, list[Any]]:
    backlog = cluster.memory.backlog
    assert backlog is not None
    return {
        "L1": backlog.sessions_owing_l1(None, 100),
        "L2": backlog.tenants_owing_l2(None, 100),
        "L3": backlog.tenants_owing_l3(None, 10**9, 100),
        "offload": cluster.offload_store.sessions_owing(None, time.time(), 100),
    }


def test_nothing_owed_is_lost_under_chaos(cluster: Cluster, scripted_llm: ScriptedLLM) -> None:
    rng = random.Random(7)
    for _ in range(WORKERS):
        cluster.spawn()
    for round_no in range(ROUNDS):
        produce(cluster, round_no, rng)
        fault(cluster, rng)
        if round_no == ROUNDS // 2:
            cluster.wipe_queue()
    while len(cluster.live()) < WORKERS:
        cluster.spawn()

    wait_until(
        "nothing owed", lambda: not any(owed(cluster).values()), deadline_s=DEADLINE_S, poll_s=0.1
    )
    check_caught_up(cluster)

    cluster.stop()
    runs = [run for tenant in TENANTS
            for run in cluster.memory.layer_service().evidence.executions(Scope(tenant),
                                                                        limit=100_000)]  # fmt: skip
    check_no_overlap(runs, cluster.killed)
    paid_for = Counter(run.type for run in runs)
    # offload-l2 asks once per task diagram of its session (session names are unique here)
    diagrams = {session: len(cluster.offload_store.list_diagrams(Scope(tenant), session))
                for tenant, session in SESSIONS}  # fmt: skip
    paid_for["offload-l2"] = sum(diagrams[r.session or ""] for r in runs if r.type == "offload-l2")
    # an L1.5 judgment whose boundary moved under it while what it was shown changed (a tool
    # result arrived) asks again within its execution, at most cas_attempts times
    paid_for["offload-l15"] *= OffloadSettings().cas_attempts
    for stage in ("L1", "L2", "L3", "offload-l1", "offload-l15", "offload-l2"):
        assert 0 < len(scripted_llm.calls(stage)) <= paid_for[stage], (stage, paid_for)


def test_a_split_deployment_owes_nothing_under_chaos(cluster: Cluster) -> None:
    """A layers-only worker, an offload-only worker, `stratamem schedule` and `serve --workers
    0`, started in random order; after each round one of them, at random, is killed and started
    again. Every kind of work is scheduled by a process that has it, whichever holds what."""
    rng = random.Random(11)
    for role in rng.sample(SPLIT, len(SPLIT)):
        cluster.spawn(role)
    for round_no in range(SPLIT_ROUNDS):
        produce(cluster, round_no, rng)
        victim = rng.choice(cluster.live())
        role = cluster.roles[cluster.procs.index(victim)]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        cluster.killed.add(f"w{cluster.procs.index(victim)}")
        cluster.spawn(role)
    assert cluster.live_roles() == set(SPLIT)

    wait_until(
        "nothing owed", lambda: not any(owed(cluster).values()), deadline_s=DEADLINE_S, poll_s=0.1
    )
    check_caught_up(cluster)
    cluster.stop()
    runs = [run for tenant in TENANTS
            for run in cluster.memory.layer_service().evidence.executions(Scope(tenant),
                                                                        limit=100_000)]  # fmt: skip
    check_no_overlap(runs, cluster.killed)


def check_caught_up(cluster: Cluster) -> None:
    """Every tenant has a profile, every turn is covered by L1, every offload entry is mapped,
    and no turn's memory was stored twice."""
    for tenant in TENANTS:
        assert cluster.call(cluster.memory.profile(tenant)) is not None
    layers = cluster.memory.layer_service().layers
    store = cluster.memory.store
    for tenant, session in SESSIONS:
        state = layers.session_state(Scope(tenant), session)
        assert state.cursor_seq == state.last_seq > 0  # every turn covered by L1
        entries = cluster.offload_store.list_entries(Scope(tenant), session)
        assert all(e.node_id for e in entries)  # every offload entry mapped
    for tenant in TENANTS:  # no turn extracted twice (a replayed or overlapping L1 would)
        sources = Counter(t for m in store.list_memories(Scope(tenant), limit=10_000)
                          for t in m.source_turn_ids)  # fmt: skip
        assert sources and max(sources.values()) == 1


def check_no_overlap(runs: list[Execution], killed: set[str]) -> None:
    """No two executions of one task, nor of one lock key, overlapped (see the module doc)."""
    by_task: dict[str, list[Execution]] = defaultdict(list)
    by_lock: dict[str, list[Execution]] = defaultdict(list)
    for run in runs:  # in the order they started
        by_task[run.attempt.task_id].append(run)
        if run.lock_key is not None:
            by_lock[run.lock_key].append(run)
    for lock, held in by_lock.items():
        tokens = [run.attempt.token or 0 for run in held]
        assert tokens == sorted(set(tokens)), f"tokens of {lock} out of start order: {tokens}"
    for key, group in itertools.chain(by_task.items(), by_lock.items()):
        assert_disjoint(key, group)
    for run in runs:
        end = run.end if run.end is not None else float("inf")
        if run.committed_at is not None:
            assert run.attempt.started_at <= run.committed_at <= end, run
        if run.end is None:  # only a killed worker leaves an execution open
            assert run.attempt.worker in killed, run


def assert_disjoint(key: str, group: Iterable[Execution]) -> None:
    for before, after in itertools.pairwise(group):
        assert before.end is not None, f"{key}: {before} still open when {after} started"
        assert before.end <= after.attempt.started_at, f"{key}: {before} overlaps {after}"
