"""A user's check of `serve` from outside, on its default settings: hold idle connections that
never send a request (400 by default), probe `/v1/health` while they are held, and time until
serve has closed them all. Prints the health probes' latency (p50, max) against probes with
nothing held (the baseline, in the same run), how many answered 200,
and the seconds until the last idle connection was closed; then the same for connections that
send half their headers and stop.

    .venv/bin/python bench/idle_connections.py [--connections 400] [--probes 40]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_process import serve

LIMIT_S = 60.0
HEALTH_TIMEOUT_S = 1.0


def hold(url: str, count: int, first_bytes: bytes) -> list[socket.socket]:
    host, port = url.removeprefix("http://").split(":")
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=10)
        if first_bytes:
            sock.sendall(first_bytes)
        sock.setblocking(False)
        socks.append(sock)
    return socks


def closed(sock: socket.socket) -> bool:
    try:
        while data := sock.recv(65536):
            del data  # a 408 answer before the close
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def probe(url: str, count: int) -> tuple[list[float], int]:
    seconds, ok = [], 0
    for _ in range(count):
        started = time.perf_counter()
        with contextlib.suppress(httpx.HTTPError):  # a probe that failed counts as not ok
            ok += httpx.get(f"{url}/v1/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
        seconds.append(time.perf_counter() - started)
    return seconds, ok


def run(url: str, count: int, probes: int, first_bytes: bytes, label: str) -> None:
    started = time.monotonic()
    socks = hold(url, count, first_bytes)
    seconds, ok = probe(url, probes)
    open_ = set(range(len(socks)))
    while open_ and time.monotonic() - started < LIMIT_S:
        open_ = {i for i in open_ if not closed(socks[i])}
        time.sleep(0.1)  # a bench polling a real server, bounded by LIMIT_S
    took = time.monotonic() - started
    for sock in socks:
        sock.close()
    print(f"{label}: {count} held; /v1/health {ok}/{probes} answered 200 within"
          f" {HEALTH_TIMEOUT_S:g} s (p50 {statistics.median(seconds) * 1000:.1f} ms, max"
          f" {max(seconds) * 1000:.1f} ms); {count - len(open_)} closed by serve after"
          f" {took:.1f} s{'' if not open_ else f', {len(open_)} STILL OPEN at {LIMIT_S:g} s'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--probes", type=int, default=40)
    args = parser.parse_args()
    with serve("hash:64", {}, "stratamem-idle-") as (url, _):
        seconds, ok = probe(url, args.probes)
        print(f"baseline, nothing held: /v1/health {ok}/{args.probes} answered 200 (p50"
              f" {statistics.median(seconds) * 1000:.1f} ms, max {max(seconds) * 1000:.1f} ms)")
        run(url, args.connections, args.probes, b"", "silent connections")
        run(url, args.connections, args.probes, b"GET /v1/health HTTP/1.1\r\nHost:", "half headers")


if __name__ == "__main__":
    main()
