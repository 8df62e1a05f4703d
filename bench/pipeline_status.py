"""What `GET /v1/pipeline` costs for a tenant with many sessions: the count of turns past their
session's cursor, read once per session (the route before) and in one aggregated query
(`LayerStore.pending_turns`, the route now), on the same SQLite store in the same run. Prints
JSON: milliseconds per call for both (median of `--repeat`), and the ratio.

    python bench/pipeline_status.py [--sessions 3000] [--turns 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stratamem.domain import Role, Scope, Turn
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.sqlite import SqliteStore

TENANT = Scope("busy")


def fill(store: SqliteStore, sessions: int, turns: int) -> None:
    """`sessions` sessions of `turns` turns for the measured tenant, as many for another one."""
    for tenant in (TENANT, Scope("other")):
        for s in range(sessions):
            store.add_turns(tenant, [
                Turn(f"{tenant.tenant}-{s}-{t}", tenant.tenant, f"s{s}", Role.USER,
                     f"turn {t} of session {s}", 1_700_000_000.0 + s * 60 + t)
                for t in range(turns)
            ])  # fmt: skip


def per_session(store: SqliteStore, layers: SqlLayerStore) -> int:
    """The route before: every session listed, then its state read, one by one."""
    return sum(
        layers.session_state(TENANT, session).pending_turns
        for session in store.list_sessions(TENANT)
    )


def median_ms(call: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, value = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        value = call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "stratamem.db")
        layers = SqlLayerStore(store)
        fill(store, args.sessions, args.turns)
        before_ms, before = median_ms(lambda: per_session(store, layers), args.repeat)
        after_ms, after = median_ms(lambda: layers.pending_turns(TENANT), args.repeat)
        store.close()
    assert before == after == args.sessions * args.turns
    print(json.dumps({
        "sessions": args.sessions, "turns_per_session": args.turns,
        "per_session_ms": round(before_ms, 2), "aggregated_ms": round(after_ms, 2),
        "speedup": round(before_ms / after_ms, 1),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
