"""The scale-out topology end to end (docs/deployment.md): 2 API processes (`stratamem serve
--workers 0`), 2 pipeline workers (`stratamem worker`), Redis for the pipeline and PostgreSQL
for the store, all on this machine, every process with the same environment; the LLM is the
scripted server. Three tenants, each with its own key, run a bounded load of captures, recalls,
tool results and flushes spread over both API processes; midway one worker (while it runs a
task) and one API process are killed with SIGKILL and started again. At the end: every
acknowledged capture and tool result is stored, exactly, once; every session's L1 caught up
(every user turn became one memory) and nothing else is owed; no dead letter; no tenant ever
saw another tenant's word.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from stratamem.domain import Scope
from stratamem.pipeline.redis_backend import RedisBackend
from stratamem.pipeline.status import WORKERS_SCOPE
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.opening import RecordStore, open_url
from stratamem.testing import ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

from ..offload import model
from ..pipeline.test_crash import wait_until
from .cluster import ADMIN_KEY, CLI, REDIS_URL, Topology, topology, topology_env
from .load import MARKERS, ROUNDS, Balancer, Ledger, SessionLoad

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres]

SESSIONS = [(tenant, f"{tenant}-s{i}") for tenant in MARKERS for i in range(3)]
TURNS = len(SESSIONS) * ROUNDS * 2
DEADLINE_S = 90.0


@pytest.fixture
def database(pg_server: str) -> Iterator[str]:
    """A new, empty database of the session's server: the processes migrate it at start."""
    import psycopg  # noqa: PLC0415 - only with the postgres extra

    name = f"topology_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    parts = urlsplit(pg_server)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)".encode())


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = f"test:topology:{uuid.uuid4().hex}:"
    yield prefix
    asyncio.run(_drop(RedisBackend(REDIS_URL, prefix=prefix)))


async def _drop(backend: RedisBackend) -> None:
    await backend.drop_all()
    await backend.close()


@pytest.fixture
def llm(scripted_llm: ScriptedLLM) -> ScriptedLLM:
    install_layer_handlers(scripted_llm)
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l15", lambda request: model.judgment("Build the site"))
    scripted_llm.on("offload-l2", model.diagram)
    return scripted_llm


def test_two_apis_and_two_workers_lose_nothing_when_one_of_each_is_killed(
    tmp_path: Path, database: str, redis_prefix: str, llm: ScriptedLLM
) -> None:
    env = topology_env(database, redis_prefix, llm.base_url, tmp_path / "data")
    with topology(env, tmp_path, apis=2, workers=2) as topo:
        tokens = {tenant: _new_tenant(topo.urls()[1], tenant) for tenant in MARKERS}
        ledger = _run_load(topo, tokens)
        assert ledger.refused == [] and ledger.leaks == []
        store = open_url(database, tmp_path / "unused.db")
        try:
            wait_until("nothing owed", lambda: _caught_up(topo, store, tokens),
                       deadline_s=DEADLINE_S, poll_s=0.2)  # fmt: skip
            _check_turns_and_memories(topo, store, tokens, ledger)
            _check_offload(topo, store, tokens, ledger)
        finally:
            store.close()
        _check_search_isolation(topo, tokens)
        _check_pipeline_status(env)
        assert llm.unscripted == []  # every LLM call was one of the layers' or offload's stages
        assert topo.all_running(), topo.log_tail()


def _new_tenant(url: str, tenant: str) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    created = httpx.post(f"{url}/v1/admin/tenants", json={"name": tenant}, headers=admin)
    assert created.status_code == 201, created.text
    issued = httpx.post(f"{url}/v1/admin/tenants/{tenant}/keys", json={}, headers=admin)
    assert issued.status_code == 201, issued.text
    return str(issued.json()["token"])


def _run_load(topo: Topology, tokens: dict[str, str]) -> Ledger:
    """Every session's client in a thread; once half the turns are acknowledged, a worker that
    runs a task and an API process are killed and started again while the clients go on."""
    ledger = Ledger()
    balancers = [Balancer(topo.urls, ledger) for _ in SESSIONS]
    loads = [SessionLoad(t, s, tokens[t], b, ledger)
             for (t, s), b in zip(SESSIONS, balancers, strict=True)]  # fmt: skip
    with ThreadPoolExecutor(len(loads)) as pool:
        running = [pool.submit(load.run) for load in loads]
        wait_until("half the turns acknowledged", lambda: ledger.acked_turns() >= TURNS // 2,
                   deadline_s=DEADLINE_S, poll_s=0.05)  # fmt: skip
        busy = wait_until("a worker running a task",
                          lambda: topo.busy_workers(_statuses(topo.env)), deadline_s=DEADLINE_S,
                          poll_s=0.05)  # fmt: skip
        victim = cast(list[int], busy)[0]
        topo.kill_worker(victim)
        topo.kill_api(0)
        topo.restart_worker(victim)
        topo.restart_api(0)
        for future in running:
            future.result(timeout=DEADLINE_S)
    for balancer in balancers:
        balancer.close()
    assert ledger.acked_turns() == TURNS  # every capture was answered, by one API or the other
    return ledger


def _statuses(env: dict[str, str]) -> list[dict[str, Any]]:
    """What every worker last published on the pipeline."""
    backend = RedisBackend(REDIS_URL, prefix=env["STRATAMEM_PIPELINE_REDIS_PREFIX"])

    async def read() -> list[dict[str, Any]]:
        try:
            raw = await backend.state_get(WORKERS_SCOPE)
        finally:
            await backend.close()
        return [json.loads(status) for status in raw.values()]

    return asyncio.run(read())


def _caught_up(topo: Topology, store: RecordStore, tokens: dict[str, str]) -> bool:
    """Nothing owed in the store (the scheduler's own queries), nothing pending or dead in any
    tenant's pipeline, every record embedded."""
    backlog, offload = SqlBacklogStore(store), SqlOffloadStore(store)
    owed = [backlog.sessions_owing_l1(None, 100), backlog.tenants_owing_l2(None, 100),
            backlog.tenants_owing_l3(None, 10**9, 100), backlog.flush_requests(None, 100),
            offload.sessions_owing(None, time.time(), 100)]  # fmt: skip
    claimed = [offload.pending_pairs(Scope(t), s) for t, s in SESSIONS]  # a live claim's too
    if any(owed) or any(claimed):
        return False
    url = topo.urls()[0]
    for token in tokens.values():
        pipeline = _get(url, "/v1/pipeline", token)
        stats = _get(url, "/v1/stats", token)
        assert pipeline["dead_letters"] == 0, _get(url, "/v1/dead-letters", token)
        pending = [stats[layer]["pending_embeddings"] for layer in ("L0", "L1")]
        if pipeline["pending_turns"] or any(pending):
            return False
    return True


def _check_turns_and_memories(
    topo: Topology, store: RecordStore, tokens: dict[str, str], ledger: Ledger
) -> None:
    """Each session holds exactly what was acknowledged, once; its L1 cursor is at its last
    turn, and every user turn became exactly one memory of its own tenant."""
    layers = SqlLayerStore(store)
    for tenant, session in SESSIONS:
        stored = {t["id"]: t for t in _get(topo.urls()[1], f"/v1/sessions/{session}/turns"
                                           "?limit=1000", tokens[tenant])}  # fmt: skip
        assert {i: t["text"] for i, t in stored.items()} == ledger.turns[tenant, session]
        state = layers.session_state(Scope(tenant), session)
        assert state.cursor_seq == state.last_seq == ROUNDS * 2
    for tenant in MARKERS:
        memories = store.list_memories(Scope(tenant), limit=10_000)
        sources = Counter(t for m in memories for t in m.source_turn_ids)
        user_turns = {i for (t, _), turns in ledger.turns.items() if t == tenant
                      for i, text in turns.items() if text.startswith("In round")}  # fmt: skip
        assert set(sources) == user_turns and max(sources.values()) == 1
        assert all(MARKERS[tenant] in m.content for m in memories)


def _check_offload(
    topo: Topology, store: RecordStore, tokens: dict[str, str], ledger: Ledger
) -> None:
    """Every acknowledged tool result became one entry mapped to a diagram node, and reads
    back exactly, through either API process."""
    offload = SqlOffloadStore(store)
    for (tenant, session), results in ledger.results.items():
        entries = {e.call_id: e for e in offload.list_entries(Scope(tenant), session)}
        assert set(entries) == set(results)
        for n, (call_id, entry) in enumerate(entries.items()):
            assert entry.node_id and entry.summary
            url = topo.urls()[n % 2]
            back = _get(url, f"/v1/offload/refs/{entry.ref_id}?max_tokens=100000",
                        tokens[tenant])  # fmt: skip
            assert back["complete"] and back["text"] == results[call_id]


def _check_search_isolation(topo: Topology, tokens: dict[str, str]) -> None:
    """Searching memories and turns for every tenant's word finds only the caller's."""
    query = {"query": "museum " + " ".join(MARKERS.values()), "k": 50, "layers": ["L0", "L1"]}
    for n, (tenant, token) in enumerate(tokens.items()):
        response = httpx.post(f"{topo.urls()[n % 2]}/v1/search", json=query,
                              headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        hits = response.json()["hits"]
        assert hits and all(MARKERS[tenant] in h["text"] for h in hits)
        others = [m for t, m in MARKERS.items() if t != tenant]
        assert not any(m in h["text"] for h in hits for m in others)


def _check_pipeline_status(env: dict[str, str]) -> None:
    """`stratamem pipeline status`, with the same configuration: no dead letter, the
    scheduler's last pass found nothing owed."""
    done = subprocess.run([*CLI, "pipeline", "status", "--json"], env=env, capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["depth"]["dead"] == 0, report
    assert not any(report["scheduler"]["backlog"].values()), report


def _get(url: str, path: str, token: str) -> Any:
    response = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()
