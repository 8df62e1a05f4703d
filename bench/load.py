"""Load benchmark of `stratamem serve`: many clients of several tenants, with and without one
tenant importing a big conversation at the same time.

Each run starts a fresh `stratamem serve` (on 127.0.0.1 only, a temporary data directory, the
configured embedder) and drives it with `--clients` concurrent clients spread over `--tenants`
tenants for `--seconds`: 70 % captures (1-3 messages), 30 % recalls. The second run does the
same while tenant t0 captures `--import-messages` messages (~1 KB each) in one request. Prints
requests per second and p50/p95/p99 latency per route for both runs, and the recall p95 of the
other tenants in the second run against the first (the target: within 2x). Each run also prints
the CPU the service spent per request (its processes' user + system time over the timed part,
divided by the requests: a figure that does not depend on what else the machine runs) and the
load average at its end. `--runs baseline` runs the first only; `--processes N` and
`--workers N` are passed to `serve` (N API processes on one port; N pipeline consumers, 0 for
the request path's CPU alone, without the layers' work; with `--embedder hash` there is
hardly any embedding either). `--text zipf` draws the words from a vocabulary of
`--vocabulary` made-up words with Zipf-distributed frequencies (rank r drawn in proportion to
1/r, as in natural text) instead of the default 20 words (`--text words20`, the figures before
it), in which every recall's words are in much of the tenant's rows and its BM25 walks them all.

    python bench/load.py [--seconds 60] [--clients 20] [--tenants 5] [--import-messages 1000]
                         [--embedder local] [--runs both|baseline] [--processes N] [--workers N]
                         [--text words20|zipf] [--vocabulary 5000]

Bounded: at most 300 s per run and 200,000 requests in all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import statistics
import time
from collections import defaultdict
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

import serve_process  # bench/serve_process.py, beside this script

MAX_SECONDS = 300.0
MAX_REQUESTS = 200_000
CAPTURE_SHARE = 0.7
IMPORTER = "t0"
WORDS = [
    "garden", "coffee", "river", "violin", "hiking", "tomato", "budget", "museum", "puppy",
    "soccer", "novel", "recipe", "bicycle", "meeting", "painting", "travel", "concert",
    "spreadsheet", "birthday", "vacation",
]  # fmt: skip


ZIPF_SEED = 7
SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "do", "ni", "por", "ax", "be", "chi",
             "fen", "gru", "hal", "jo", "ku", "mar", "os"]  # fmt: skip


@dataclass(frozen=True)
class Vocabulary:
    """The words sentences are drawn from, and their cumulative weights (None: uniform)."""

    words: list[str]
    cum_weights: list[float] | None = None

    def draw(self, rng: random.Random, count: int) -> list[str]:
        if self.cum_weights is None:
            return [rng.choice(self.words) for _ in range(count)]
        return rng.choices(self.words, cum_weights=self.cum_weights, k=count)


def zipf_vocabulary(size: int) -> Vocabulary:
    """`size` distinct made-up words of 2-4 syllables, the word of rank r weighted 1/r."""
    rng, words, seen = random.Random(ZIPF_SEED), [], set()
    while len(words) < size:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    total, cumulative = 0.0, []
    for rank in range(1, size + 1):
        total += 1.0 / rank
        cumulative.append(total)
    return Vocabulary(words, cumulative)


def vocabulary_for(args: argparse.Namespace) -> Vocabulary:
    return zipf_vocabulary(args.vocabulary) if args.text == "zipf" else Vocabulary(WORDS)


@dataclass
class Sample:
    route: str
    tenant: str
    seconds: float
    status: int


@dataclass
class Run:
    name: str
    text: str = "words20"
    rate: float | None = None
    elapsed_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    import_s: float | None = None
    import_status: int | None = None
    cpu_s: float = 0.0
    load: float = 0.0


@contextmanager
def serve(
    embedder: str, admin_key: str, processes: int | None, workers: int | None = None
) -> Iterator[tuple[str, int]]:
    """A fresh `stratamem serve` on 127.0.0.1; its base URL and pid. Stopped (SIGTERM) on exit."""
    env = {"STRATAMEM_SERVER_ADMIN_KEY": admin_key}
    args = [] if processes is None else ["--processes", str(processes)]
    args += [] if workers is None else ["--workers", str(workers)]
    with serve_process.serve(embedder, env, "stratamem-load-", args) as found:
        yield found


def sentence(rng: random.Random, words: int, vocabulary: Vocabulary = Vocabulary(WORDS)) -> str:
    return " ".join(vocabulary.draw(rng, words)).capitalize() + "."


async def keys_for(url: str, admin_key: str, tenants: list[str]) -> dict[str, str]:
    admin = {"Authorization": f"Bearer {admin_key}"}
    keys = {}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for tenant in tenants:
            (await client.post("/v1/admin/tenants", json={"name": tenant}, headers=admin))\
                .raise_for_status()  # fmt: skip
            issued = await client.post(f"/v1/admin/tenants/{tenant}/keys", json={}, headers=admin)
            keys[tenant] = issued.raise_for_status().json()["token"]
    return keys


async def client_loop(
    client: httpx.AsyncClient, tenant: str, key: str, rng: random.Random, deadline: float,
    run: Run, budget: list[int], vocabulary: Vocabulary,
) -> None:  # fmt: skip
    """A closed-loop client: its next request leaves when the last one is answered."""
    session = f"s{rng.randrange(1000)}"
    while time.monotonic() < deadline and budget[0] > 0:
        budget[0] -= 1
        await one_request(client, tenant, key, session, rng, vocabulary, run, time.perf_counter())


async def paced_clients(
    client: httpx.AsyncClient, keys: dict[str, str], deadline: float, run: Run,
    budget: list[int], vocabulary: Vocabulary, rate: float,
) -> None:  # fmt: skip
    """Open loop: request k leaves at start + k / rate whatever the service does, and its
    latency counts from then (a request that waits for a free connection waits in its figure:
    no coordinated omission)."""
    rng, tenants = random.Random(0), sorted(keys)
    sessions = {tenant: f"s{rng.randrange(1000)}" for tenant in tenants}
    perf_start, start, pending = time.perf_counter(), time.monotonic(), set()
    for k in range(budget[0]):
        if start + k / rate >= deadline:
            break
        await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
        tenant = tenants[k % len(tenants)]
        request = one_request(client, tenant, keys[tenant], sessions[tenant], rng, vocabulary,
                              run, perf_start + k / rate)  # fmt: skip
        pending.add(asyncio.ensure_future(request))
        pending = {job for job in pending if not job.done()}
    await asyncio.gather(*pending)


async def one_request(
    client: httpx.AsyncClient, tenant: str, key: str, session: str, rng: random.Random,
    vocabulary: Vocabulary, run: Run, start: float,
) -> None:  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    if rng.random() < CAPTURE_SHARE:
        route = "/v1/capture"
        messages = [{"role": rng.choice(["user", "assistant"]),
                     "content": sentence(rng, rng.randint(8, 24), vocabulary)}
                    for _ in range(rng.randint(1, 3))]  # fmt: skip
        body: dict[str, object] = {"session": session, "messages": messages}
    else:
        route, body = "/v1/recall", {"query": sentence(rng, rng.randint(3, 8), vocabulary)}
    try:
        status = (await client.post(route, json=body, headers=headers)).status_code
    except httpx.TimeoutException:
        status = 0  # counted as an error, with the time it took to give up
    run.samples.append(Sample(route, tenant, time.perf_counter() - start, status))


async def big_import(
    client: httpx.AsyncClient, key: str, count: int, run: Run, vocabulary: Vocabulary
) -> None:
    rng = random.Random(99)
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": " ".join(sentence(rng, 12, vocabulary) for _ in range(10))[:940]}
                for i in range(count)]  # fmt: skip
    start = time.perf_counter()
    response = await client.post(
        "/v1/capture", json={"session": "import", "messages": messages},
        headers={"Authorization": f"Bearer {key}"}, timeout=600,
    )  # fmt: skip
    run.import_s, run.import_status = time.perf_counter() - start, response.status_code


async def drive(url: str, pid: int, admin_key: str, args: argparse.Namespace, run: Run) -> None:
    tenants = [f"t{i}" for i in range(args.tenants)]
    keys = await keys_for(url, admin_key, tenants)
    limits = httpx.Limits(max_connections=args.clients + 2)
    budget = [MAX_REQUESTS // 2]
    vocabulary = vocabulary_for(args)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        for tenant in tenants:  # warm up: the embedding model loads on the first query
            warm = {"query": "warm up"}
            auth = {"Authorization": f"Bearer {keys[tenant]}"}
            (await client.post("/v1/recall", json=warm, headers=auth, timeout=600))\
                .raise_for_status()  # fmt: skip
        cpu_before = serve_process.cpu_seconds(pid)
        start = time.monotonic()
        deadline = start + min(args.seconds, MAX_SECONDS)
        jobs: list[Coroutine[Any, Any, None]] = [
            client_loop(client, tenants[i % len(tenants)], keys[tenants[i % len(tenants)]],
                        random.Random(i), deadline, run, budget, vocabulary)
            for i in range(args.clients)
        ] if args.rate is None else [
            paced_clients(client, keys, deadline, run, budget, vocabulary, args.rate)
        ]  # fmt: skip
        if run.name == "with import":
            jobs.append(big_import(client, keys[IMPORTER], args.import_messages, run, vocabulary))
        await asyncio.gather(*jobs)
        run.elapsed_s = time.monotonic() - start
        run.cpu_s = serve_process.cpu_seconds(pid) - cpu_before
        run.load = os.getloadavg()[0]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(run: Run) -> None:
    cpu_ms = 1e3 * run.cpu_s / max(len(run.samples), 1)
    offered = "closed loop" if run.rate is None else f"open loop, {run.rate:g} req/s offered"
    print(f"\n== {run.name} ({run.text}, {offered}): {len(run.samples)} requests in"
          f" {run.elapsed_s:.1f} s ({len(run.samples) / run.elapsed_s:.1f} req/s); service CPU"
          f" {cpu_ms:.2f} ms a request; load {run.load:.2f}")  # fmt: skip
    print(f"{'route':<14}{'count':>7}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
          f"{'non-2xx':>9}")  # fmt: skip
    by_route: dict[str, list[Sample]] = defaultdict(list)
    for sample in run.samples:
        by_route[sample.route].append(sample)
    for route, samples in sorted(by_route.items()):
        ms = [s.seconds * 1e3 for s in samples]
        bad = sum(1 for s in samples if not 200 <= s.status < 300)
        print(f"{route:<14}{len(ms):>7}{len(ms) / run.elapsed_s:>8.1f}{statistics.median(ms):>9.1f}"
              f"{percentile(ms, 0.95):>9.1f}{percentile(ms, 0.99):>9.1f}{bad:>9}")  # fmt: skip
    if run.import_s is not None:
        print(f"import of t0 ({IMPORTER}): status {run.import_status} in {run.import_s:.1f} s")


def others_recall_p95_ms(run: Run) -> float:
    ms = [s.seconds * 1e3 for s in run.samples if s.route == "/v1/recall" and s.tenant != IMPORTER]
    return percentile(ms, 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rate", type=float, default=None,
                        help="open loop: requests a second offered (at most --clients open)")
    parser.add_argument("--tenants", type=int, default=5)
    parser.add_argument("--import-messages", type=int, default=1000)
    parser.add_argument("--embedder", default="local")
    parser.add_argument("--runs", choices=("both", "baseline"), default="both")
    parser.add_argument("--processes", type=int, default=None, help="serve's --processes")
    parser.add_argument("--workers", type=int, default=None, help="serve's --workers")
    parser.add_argument("--text", choices=("words20", "zipf"), default="words20")
    parser.add_argument("--vocabulary", type=int, default=5000, help="words of --text zipf")
    args = parser.parse_args()
    admin_key = secrets.token_urlsafe(32)
    text = args.text if args.text == "words20" else f"zipf over {args.vocabulary} words"
    runs = [Run("baseline", text, args.rate), Run("with import", text, args.rate)]
    runs = runs[: 2 if args.runs == "both" else 1]
    for run in runs:
        with serve(args.embedder, admin_key, args.processes, args.workers) as (url, pid):
            asyncio.run(drive(url, pid, admin_key, args, run))
        report(run)
    if len(runs) == 1:
        return
    base, loaded = (others_recall_p95_ms(r) for r in runs)
    ratio = loaded / base
    print(f"\nrecall p95 of the tenants not importing: {base:.1f} ms without the import,"
          f" {loaded:.1f} ms with it: x{ratio:.2f} (target: at most x2.00)"
          f" {'OK' if ratio <= 2.0 else 'OVER'}")  # fmt: skip


if __name__ == "__main__":
    main()
