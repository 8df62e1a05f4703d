"""Soak benchmark of `stratamem serve`: does a long-running server keep its memory, file
descriptors and threads flat, and lose no turn, while ever new tenants and sessions come and go?

Starts a fresh `stratamem serve` (127.0.0.1, a temporary data directory, the embedded defaults:
SQLite, the in-process pipeline, the configured embedder) with the layers and the offload stages
on a scripted OpenAI-compatible server (`stratamem.testing.ScriptedLLM`) that answers like a
cooperative model, except that `--bad-share` of its L1 and offload-l1 replies are malformed or
cut off (`finish_reason: length`) and every L1 batch holding a "poison" turn is malformed (that
turn must end quarantined). `--clients` concurrent clients then drive it for `--seconds`: a new
tenant every `--new-tenant-s`, new sessions all the time; captures, tool-call offload (results and
user messages), recalls and waited flushes. Every `--sample-s` the server process's RSS, open
file descriptors and threads are read from /proc.

At the end it waits (bounded) until the pipeline of every tenant is idle (nothing queued, no turn
past a session's cursor) and checks the invariant: every captured user turn is the source of an
accepted memory or the subject of a quarantine record (`/v1/memories`, `/v1/failures`), and no
turn is left unread (`/v1/pipeline`). Prints RSS at start / middle / end, its growth per 1,000
requests after the warm-up (least squares over the samples), fds and threads, and the verdict.

    python bench/soak.py [--seconds 120] [--clients 8] [--embedder local] [--bad-share 0.1]

Bounded: at most 3,600 s of load, 1,000,000 requests, and `--drain-s` to go idle. Linux only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import secrets
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import serve_process  # bench/serve_process.py, beside this script
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply

MAX_SECONDS = 3_600.0
MAX_REQUESTS = 1_000_000
WARM_UP_SHARE = 0.25
POISON = "poison"
_CALL = re.compile(r"^\[([^\]]+)\] tool: (\S+)$", re.MULTILINE)
_NEW_CALL = re.compile(r"^\[([^\]]+)\] ", re.MULTILINE)
WORDS = [
    "garden", "coffee", "river", "violin", "hiking", "tomato", "budget", "museum", "puppy",
    "soccer", "novel", "recipe", "bicycle", "meeting", "painting", "travel", "concert",
    "spreadsheet", "birthday", "vacation",
]  # fmt: skip
#: Operations of a client and their weights.
MIX = {"capture": 50, "tool_results": 20, "user_message": 5, "recall": 20, "flush": 5}
#: The layers run within the soak, not after minutes (the defaults suit real traffic).
SERVE_ENV = {
    "STRATAMEM_LLM_MODEL": "scripted-chat",
    "STRATAMEM_LAYERS_IDLE_TIMEOUT_S": "5",
    "STRATAMEM_LAYERS_L1_EVERY_TURNS": "6",
    "STRATAMEM_LAYERS_L2_MIN_INTERVAL_S": "10",
    "STRATAMEM_LAYERS_L3_EVERY_MEMORIES": "10",
    "STRATAMEM_PIPELINE_L2_DELAY_S": "3",
    "STRATAMEM_PIPELINE_SCHEDULER_GRACE_S": "10",
}


# -- the scripted model --------------------------------------------------------------------
class Model:
    """Cooperative answers for every stage; `bad_share` of L1 / offload-l1 answers are broken."""

    def __init__(self, bad_share: float, seed: int) -> None:
        self.bad_share = bad_share
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.broken: Counter[str] = Counter()

    def install(self, llm: ScriptedLLM) -> None:
        install_layer_handlers(llm)
        llm.on("L1", self.l1)
        llm.on("offload-l1", self.summaries)
        llm.on("offload-l15", lambda request: Reply.json(
            {"completed": False, "continues": None, "new_task": "Soak", "long_task": False}
        ))  # fmt: skip
        llm.on("offload-l2", self.diagram)

    def _broken(self, stage: str) -> Reply | None:
        with self._lock:
            roll = self._rng.random()
        if roll >= self.bad_share:
            return None
        self.broken[stage] += 1
        if roll < self.bad_share / 2:
            return Reply.truncated('{"memories": [{"type": "epi')
        return Reply.text("Sure! Here is what I found: nothing in JSON, sorry.")

    def l1(self, request: RecordedRequest) -> Reply:
        new_part = "\n".join(str(m.get("content") or "") for m in request.messages)
        if POISON in new_part.split("NEW turns", 1)[-1]:
            self.broken["L1-poison"] += 1
            return Reply.text('{"memories": [')
        return self._broken("L1") or l1_reply(request)

    def summaries(self, request: RecordedRequest) -> Reply:
        broken = self._broken("offload-l1")
        if broken is not None:
            return broken
        shown = _CALL.findall(_user_text(request).split("TOOL CALLS", 1)[-1])
        entries = [{"call_id": i, "summary": f"{tool} answered", "score": 7} for i, tool in shown]
        return Reply.json({"entries": entries})

    def diagram(self, request: RecordedRequest) -> Reply:
        ids = _NEW_CALL.findall(_user_text(request).split("NEW TOOL CALLS", 1)[-1])
        rewrite = 'flowchart TD\n  plan["Plan"] --> work["Do the work"]'
        mapping = [{"call_id": i, "node": "work"} for i in ids]
        return Reply.json({"rewrite": rewrite, "edits": [], "mapping": mapping})


def _user_text(request: RecordedRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages if m["role"] == "user")


# -- the server process ----------------------------------------------------------------------
@contextmanager
def serve(embedder: str, admin_key: str, llm_url: str) -> Iterator[tuple[str, int]]:
    """A fresh `stratamem serve`; its base URL and pid. Stopped (SIGTERM) on exit."""
    env = {**SERVE_ENV, "STRATAMEM_SERVER_ADMIN_KEY": admin_key, "STRATAMEM_LLM_BASE_URL": llm_url}
    with serve_process.serve(embedder, env, "stratamem-soak-") as found:
        yield found


@dataclass
class Sample:
    at_s: float
    requests: int
    rss_kib: int
    fds: int
    threads: int


def sample(pid: int, at_s: float, requests: int) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields["VmRSS"].split()[0])
    return Sample(at_s, requests, rss_kib, len(os.listdir(f"/proc/{pid}/fd")),
                  int(fields["Threads"]))  # fmt: skip


# -- the clients -----------------------------------------------------------------------------
@dataclass
class Tenant:
    name: str
    key: str
    sessions: list[str] = field(default_factory=list)
    user_turns: set[str] = field(default_factory=set)
    poisoned: set[str] = field(default_factory=set)


@dataclass
class Soak:
    url: str
    admin: dict[str, str]
    deadline: float
    tenants: list[Tenant] = field(default_factory=list)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    requests: int = 0
    serial: int = 0

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial


async def new_tenant(client: httpx.AsyncClient, soak: Soak) -> Tenant:
    name = f"t{len(soak.tenants)}"
    (await client.post("/v1/admin/tenants", json={"name": name}, headers=soak.admin))\
        .raise_for_status()  # fmt: skip
    issued = await client.post(f"/v1/admin/tenants/{name}/keys", json={}, headers=soak.admin)
    tenant = Tenant(name, issued.raise_for_status().json()["token"])
    soak.tenants.append(tenant)
    return tenant


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def pick_session(tenant: Tenant, rng: random.Random) -> str:
    """A session of the tenant: a new one a fifth of the time, else one of its latest five."""
    if not tenant.sessions or rng.random() < 0.2:
        tenant.sessions.append(f"s{len(tenant.sessions)}")
    return rng.choice(tenant.sessions[-5:])


async def capture(
    client: httpx.AsyncClient, soak: Soak, tenant: Tenant, session: str, rng: random.Random
) -> int:
    messages = []
    for _ in range(rng.randint(1, 3)):
        role = rng.choice(["user", "assistant"])
        text = f"{sentence(rng, rng.randint(6, 20))} (note {soak.next_serial()})"
        if role == "user" and rng.random() < 0.01:
            text = f"{text} {POISON}"
        messages.append({"role": role, "content": text})
    response = await client.post("/v1/capture", json={"session": session, "messages": messages},
                                 headers=_auth(tenant))  # fmt: skip
    if response.status_code == 200:
        for message, turn_id in zip(messages, response.json()["ids"], strict=True):
            if message["role"] == "user":
                tenant.user_turns.add(turn_id)
                if POISON in message["content"]:
                    tenant.poisoned.add(turn_id)
    return response.status_code


async def tool_results(
    client: httpx.AsyncClient, soak: Soak, tenant: Tenant, session: str, rng: random.Random
) -> int:
    pairs = [{"call_id": f"call-{soak.next_serial()}", "tool": rng.choice(["search", "read_file"]),
              "params": {"q": sentence(rng, 3)}, "result": sentence(rng, 40) * rng.randint(1, 20)}
             for _ in range(rng.randint(1, 3))]  # fmt: skip
    url = f"/v1/offload/sessions/{session}/tool-results"
    return (await client.post(url, json={"pairs": pairs}, headers=_auth(tenant))).status_code


async def one_request(
    client: httpx.AsyncClient, soak: Soak, tenant: Tenant, rng: random.Random
) -> tuple[str, int]:
    op = rng.choices(list(MIX), weights=list(MIX.values()))[0]
    session = pick_session(tenant, rng)
    if op == "capture":
        return op, await capture(client, soak, tenant, session, rng)
    if op == "tool_results":
        return op, await tool_results(client, soak, tenant, session, rng)
    if op == "user_message":
        url, body = f"/v1/offload/sessions/{session}/user-messages", {"text": sentence(rng, 8)}
    elif op == "recall":
        url, body = "/v1/recall", {"query": sentence(rng, 5), "session": session}
    else:
        url, body = f"/v1/sessions/{session}/flush?wait=true", None
    return op, (await client.post(url, json=body, headers=_auth(tenant))).status_code


async def client_loop(client: httpx.AsyncClient, soak: Soak, rng: random.Random) -> None:
    while time.monotonic() < soak.deadline and soak.requests < MAX_REQUESTS:
        recent = soak.tenants[-10:]  # new tenants take the traffic; older ones go quiet
        tenant = rng.choice(recent)
        try:
            op, status = await one_request(client, soak, tenant, rng)
        except httpx.TimeoutException:
            op, status = "timeout", 0
        soak.requests += 1
        soak.statuses[(op, status)] += 1


async def tenant_loop(client: httpx.AsyncClient, soak: Soak, every_s: float) -> None:
    while time.monotonic() + every_s < soak.deadline:
        await asyncio.sleep(every_s)  # the pace of new tenants, not a wait for a condition
        await new_tenant(client, soak)


async def sampler(pid: int, soak: Soak, start: float, every_s: float, out: list[Sample]) -> None:
    while True:
        out.append(sample(pid, time.monotonic() - start, soak.requests))
        if time.monotonic() >= soak.deadline:
            return
        await asyncio.sleep(every_s)  # the sampling period


# -- the end: idle, then the invariant ---------------------------------------------------------
async def drain(client: httpx.AsyncClient, soak: Soak, limit_s: float) -> tuple[float, bool]:
    """Seconds until every tenant's pipeline is idle (or `limit_s` ran out: False); prints what
    is left every 30 s."""
    start = last_print = time.monotonic()
    while time.monotonic() - start < limit_s:
        queued = pending = 0
        for tenant in soak.tenants:
            view = (await client.get("/v1/pipeline", headers=_auth(tenant))).json()
            queued, pending = queued + view["queued"], pending + view["pending_turns"]
        if queued + pending == 0:
            return time.monotonic() - start, True
        if time.monotonic() - last_print >= 30:
            last_print = time.monotonic()
            print(f"  draining: {queued} tasks queued, {pending} turns unread after"
                  f" {last_print - start:.0f} s", flush=True)  # fmt: skip
        await asyncio.sleep(2.0)  # polling a server's background work, bounded by limit_s
    scheduler = (await client.get("/v1/admin/pipeline", headers=soak.admin)).json()
    print("  not idle; the pipeline:", scheduler, flush=True)
    return time.monotonic() - start, False


async def paged(client: httpx.AsyncClient, tenant: Tenant, url: str, page: int) -> list[Any]:
    found: list[Any] = []
    while True:
        params: dict[str, Any] = {"limit": page, "offset": len(found)}
        if url == "/v1/failures":
            params["kind"] = "quarantine"
        rows = (await client.get(url, params=params, headers=_auth(tenant))).raise_for_status()
        found.extend(rows.json())
        if len(rows.json()) < page:
            return found


async def invariant(client: httpx.AsyncClient, soak: Soak) -> dict[str, int]:
    """Every captured user turn: the source of a memory, or quarantined; none left unread."""
    counts: Counter[str] = Counter()
    for tenant in soak.tenants:
        memories = await paged(client, tenant, "/v1/memories", 1000)
        quarantines = await paged(client, tenant, "/v1/failures", 500)
        sourced = {t for m in memories for t in m["source_turn_ids"]}
        quarantined = {t for f in quarantines for t in f["turn_ids"]}
        view = (await client.get("/v1/pipeline", headers=_auth(tenant))).json()
        counts["user turns"] += len(tenant.user_turns)
        counts["covered by a memory"] += len(tenant.user_turns & sourced)
        counts["quarantined"] += len(tenant.user_turns & quarantined)
        counts["lost"] += len(tenant.user_turns - sourced - quarantined)
        counts["poison turns"] += len(tenant.poisoned)
        counts["poison turns not quarantined"] += len(tenant.poisoned - quarantined)
        counts["turns unread"] += view["pending_turns"]
        counts["dead letters"] += view["dead_letters"]
    return dict(counts)


def _auth(tenant: Tenant) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.key}"}


# -- the run and its report --------------------------------------------------------------------
async def run(url: str, pid: int, args: argparse.Namespace, admin_key: str) -> None:
    samples: list[Sample] = []
    limits = httpx.Limits(max_connections=args.clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        soak = Soak(url, {"Authorization": f"Bearer {admin_key}"}, deadline=float("inf"))
        for _ in range(3):
            await new_tenant(client, soak)
        warm = {"query": "warm up"}  # the embedding model loads on the first query
        (await client.post("/v1/recall", json=warm, headers=_auth(soak.tenants[0]),
                           timeout=600)).raise_for_status()  # fmt: skip
        start = time.monotonic()
        soak.deadline = start + min(args.seconds, MAX_SECONDS)
        await asyncio.gather(
            sampler(pid, soak, start, args.sample_s, samples),
            tenant_loop(client, soak, args.new_tenant_s),
            *(client_loop(client, soak, random.Random(i)) for i in range(args.clients)),
        )
        elapsed = time.monotonic() - start
        drained_s, idle = await drain(client, soak, args.drain_s)
        samples.append(sample(pid, time.monotonic() - start, soak.requests))
        verdict = await invariant(client, soak)
    report(soak, samples, elapsed, (drained_s, idle), verdict)


def growth_kib_per_1000(samples: list[Sample]) -> float:
    """Least-squares slope of RSS over requests, per 1,000 requests."""
    xs, ys = [s.requests for s in samples], [s.rss_kib for s in samples]
    if len(xs) < 2 or max(xs) == min(xs):
        return 0.0
    return statistics.linear_regression(xs, ys).slope * 1000


def report(soak: Soak, samples: list[Sample], elapsed: float, drained: tuple[float, bool],
           verdict: dict[str, int]) -> None:  # fmt: skip
    print(f"{soak.requests} requests in {elapsed:.0f} s ({soak.requests / elapsed:.1f} req/s),"
          f" {len(soak.tenants)} tenants, {sum(len(t.sessions) for t in soak.tenants)} sessions")
    print("requests by operation and status:",
          ", ".join(f"{op} {st}: {n}" for (op, st), n in sorted(soak.statuses.items())))
    print(f"{'at s':>7}{'requests':>10}{'RSS MiB':>9}{'fds':>6}{'threads':>9}")
    for s in samples:
        print(f"{s.at_s:>7.0f}{s.requests:>10}{s.rss_kib / 1024:>9.1f}{s.fds:>6}{s.threads:>9}")
    loaded = samples[:-1]  # the last sample is after the drain
    after = [s for s in loaded if s.at_s >= WARM_UP_SHARE * elapsed]
    first, middle, last = loaded[0], loaded[len(loaded) // 2], loaded[-1]
    print(f"RSS MiB: start {first.rss_kib / 1024:.1f}, middle {middle.rss_kib / 1024:.1f},"
          f" end {last.rss_kib / 1024:.1f}, after the drain {samples[-1].rss_kib / 1024:.1f}")
    print(f"RSS growth after the warm-up (first {WARM_UP_SHARE:.0%} of the time):"
          f" {growth_kib_per_1000(after):+.1f} KiB per 1,000 requests"
          f" ({after[0].rss_kib / 1024:.1f} -> {after[-1].rss_kib / 1024:.1f} MiB over"
          f" {after[-1].requests - after[0].requests} requests)")
    print(f"fds: {first.fds} -> {last.fds} (max {max(s.fds for s in samples)});"
          f" threads: {first.threads} -> {last.threads} (max {max(s.threads for s in samples)})")
    drained_s, idle = drained
    print(f"pipeline idle after {drained_s:.0f} s" if idle else
          f"pipeline NOT idle after {drained_s:.0f} s")  # fmt: skip
    print("invariant:", ", ".join(f"{k} {v}" for k, v in verdict.items()))
    held = idle and verdict.get("lost", 1) == 0 and verdict.get("turns unread", 1) == 0 \
        and verdict.get("poison turns not quarantined", 1) == 0  # fmt: skip
    print("every captured turn covered or quarantined:", "OK" if held else "BROKEN")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--new-tenant-s", type=float, default=3.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--drain-s", type=float, default=300.0)
    parser.add_argument("--bad-share", type=float, default=0.1)
    parser.add_argument("--embedder", default="local")
    args = parser.parse_args()
    admin_key = secrets.token_urlsafe(32)
    model = Model(args.bad_share, seed=7)
    with ScriptedLLM() as llm:
        model.install(llm)
        with serve(args.embedder, admin_key, f"{llm.base_url}") as (url, pid):
            asyncio.run(run(url, pid, args, admin_key))
        print("scripted replies broken on purpose:", dict(model.broken),
              f"of {len(llm.requests)} LLM requests")  # fmt: skip


if __name__ == "__main__":
    main()
