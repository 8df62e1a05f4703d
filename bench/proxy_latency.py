"""What the memory proxy adds to a model call: time to the first byte (recall included) and the
delay of each streamed chunk, against calling the same upstream directly, in the same run.

The upstream is the scripted OpenAI-compatible server (`stratamem.testing.ScriptedLLM`) in this
process, streaming `--chunks` pieces `--interval-ms` apart; `stratamem serve` runs as its own
process with `STRATAMEM_PROXY_UPSTREAM` pointing at it, the local embedding model by default
(`--embedder hash:64` for a quick run), and a tenant holding `--turns` captured turns, so each
call through the proxy recalls over real data. Direct and proxied calls alternate, `--calls`
each, with the same conversation; the proxy's calls capture into one session (each message
once, as a real conversation's resent history).

    .venv/bin/python bench/proxy_latency.py [--calls 40] [--turns 300] [--embedder local]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import httpx

import serve_process  # bench/serve_process.py, beside this script
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM

ADMIN_KEY = "bench-admin-key-0123456789abcdefghijklmnop"
TOPICS = ["hiking in the Alps", "my sister's wedding", "the kitchen renovation",
          "learning Rust", "our dog Biscuit", "the marathon in May", "a job interview",
          "planting tomatoes"]  # fmt: skip


def main() -> None:
    args = _arguments()
    with ScriptedLLM() as upstream:
        pieces = tuple(f"word{i} " for i in range(args.chunks))
        upstream.handler = lambda request: _reply(request, pieces, args.interval_ms / 1000)
        env = {"STRATAMEM_PROXY_UPSTREAM": upstream.base_url,
               "STRATAMEM_PROXY_UPSTREAM_KEY": "bench-upstream-key",
               "STRATAMEM_SERVER_ADMIN_KEY": ADMIN_KEY,
               "STRATAMEM_SERVER_TENANT_REQUESTS_PER_S": "0"}  # fmt: skip
        with serve_process.serve(args.embedder, env, "stratamem-proxy-bench-") as (url, _pid):
            key = _tenant_with_turns(url, args.turns)
            results = _measure(url, key, upstream.base_url, args)
    _report(results, args)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="calls of each kind")
    parser.add_argument("--turns", type=int, default=300, help="turns the tenant holds")
    parser.add_argument("--chunks", type=int, default=8, help="streamed pieces per answer")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="upstream pause per piece")
    parser.add_argument("--embedder", default="local")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args()


def _reply(request: RecordedRequest, pieces: tuple[str, ...], interval_s: float) -> Reply:
    return Reply.streamed(*pieces, interval_s=interval_s)


def _tenant_with_turns(url: str, turns: int) -> str:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=url, timeout=120) as http:
        http.post("/v1/admin/tenants", json={"name": "bench"}, headers=admin).raise_for_status()
        issued = http.post("/v1/admin/tenants/bench/keys", json={}, headers=admin)
        key = str(issued.raise_for_status().json()["token"])
        messages = [{"role": "user" if i % 2 == 0 else "assistant",
                     "content": f"Turn {i}: about {TOPICS[i % len(TOPICS)]}, detail {i * 7}."}
                    for i in range(turns)]  # fmt: skip
        mine = {"Authorization": f"Bearer {key}"}
        http.post("/v1/capture", json={"session": "history", "messages": messages},
                  headers=mine).raise_for_status()  # fmt: skip
        _wait_ready(http)
    return key


def _wait_ready(http: httpx.Client) -> None:
    deadline = time.monotonic() + 120
    while http.get("/v1/ready").status_code != 200:
        if time.monotonic() > deadline:
            raise SystemExit("the embedding model did not load in time")
        time.sleep(0.2)  # waiting for the model to load, bounded


def _conversation() -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a helpful assistant. " * 20},
        {"role": "user", "content": "Tell me about the marathon in May."},
        {"role": "assistant", "content": "word0 word1 word2"},
        {"role": "user", "content": "And what did I say about our dog Biscuit?"},
    ]


def _timed_stream(http: httpx.Client, url: str, key: str, session: bool) -> list[float]:
    """Seconds from sending to the first byte, then to each later read, of one streamed call."""
    headers = {"Authorization": f"Bearer {key}"}
    if session:
        headers["X-Stratamem-Session"] = "bench-chat"
    body = {"model": "scripted-chat", "stream": True, "messages": _conversation()}
    start = time.perf_counter()
    arrivals = []
    with http.stream("POST", url, json=body, headers=headers) as answer:
        answer.raise_for_status()
        for _ in answer.iter_raw():
            arrivals.append(time.perf_counter() - start)
    return arrivals


def _measure(url: str, key: str, upstream: str, args: argparse.Namespace) -> dict[str, Any]:
    direct_url = f"{upstream}/chat/completions"
    proxy_url = f"{url}/openai/v1/chat/completions"
    runs: dict[str, list[list[float]]] = {"direct": [], "proxy": []}
    with httpx.Client(timeout=60) as http:
        for warm in range(3):  # connections, the model's first query, the session's capture
            _timed_stream(http, proxy_url, key, True)
            _timed_stream(http, direct_url, "bench-upstream-key", False)
            del warm
        for _ in range(args.calls):
            runs["direct"].append(_timed_stream(http, direct_url, "bench-upstream-key", False))
            runs["proxy"].append(_timed_stream(http, proxy_url, key, True))
    return runs


def _report(runs: dict[str, list[list[float]]], args: argparse.Namespace) -> None:
    figures: dict[str, Any] = {"calls": args.calls, "turns": args.turns, "embedder": args.embedder,
                               "chunks": args.chunks, "interval_ms": args.interval_ms}  # fmt: skip
    for kind, calls in runs.items():
        first = [c[0] * 1000 for c in calls]
        last = [c[-1] * 1000 for c in calls]
        figures[kind] = {"ttfb_p50_ms": statistics.median(first),
                         "ttfb_p95_ms": _p95(first), "total_p50_ms": statistics.median(last)}
    direct, proxy = figures["direct"], figures["proxy"]
    figures["added_ttfb_p50_ms"] = proxy["ttfb_p50_ms"] - direct["ttfb_p50_ms"]
    figures["added_ttfb_p95_ms"] = proxy["ttfb_p95_ms"] - direct["ttfb_p95_ms"]
    figures["added_after_first_p50_ms"] = statistics.median(
        (p[-1] - p[0] - (d[-1] - d[0])) * 1000
        for p, d in zip(runs["proxy"], runs["direct"], strict=True)
    )
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{args.calls} calls each, {args.turns} turns in the tenant, embedder {args.embedder},"
          f" {args.chunks} chunks {args.interval_ms:g} ms apart, load {os.getloadavg()[0]:.1f}")
    for kind in ("direct", "proxy"):
        row = figures[kind]
        print(f"{kind:>7}: first byte p50 {row['ttfb_p50_ms']:7.1f} ms  p95"
              f" {row['ttfb_p95_ms']:7.1f} ms  whole stream p50 {row['total_p50_ms']:7.1f} ms")
    print(f"  added: first byte p50 {figures['added_ttfb_p50_ms']:+.1f} ms, p95"
          f" {figures['added_ttfb_p95_ms']:+.1f} ms; from the first byte to the end, p50"
          f" {figures['added_after_first_p50_ms']:+.1f} ms ({args.chunks} chunks passed"
          " through, then the capture before [DONE])")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


if __name__ == "__main__":
    main()
