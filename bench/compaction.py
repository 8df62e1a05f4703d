"""Compaction benchmark: a synthetic long tool-using session, compacted at each fill level.

Builds a session of `--tasks` tasks (a user message, then 8-24 tool calls each: file reads,
test runs, greps, listings, HTTP fetches, of realistic sizes), ingests it into a fresh store,
runs offload offline (deterministic summaries and scores; diagrams need an LLM and are not
made) and compacts the whole chat context for budgets that make it 60 %, 90 %, 150 % and
300 % full, and for a 128k-token window. Prints JSON figures: tokens before and after, results
replaced, messages dropped, and the share of tool results recoverable exactly (verbatim in the
context, or by a ref the context names, read back and compared byte for byte). Baseline in the
same run: dropping the oldest messages until the context fits, without offload.

    python bench/compaction.py [--tasks 30] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from stratamem.clock import ManualClock
from stratamem.offload import InProcessRunner, Offload, ToolPair
from stratamem.offload.results import Compaction
from stratamem.offload.tokens import context_tokens, message_tokens
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.sqlite import SqliteStore

TENANT, SESSION = "bench", "long-session"
FILLS = (0.6, 0.9, 1.5, 3.0)
WINDOW_TOKENS = 128_000
"""Also compacted for a typical 128k-token context window."""
Message = dict[str, Any]


def _code(rng: random.Random, lines: int) -> str:
    names = ["parse", "load", "render", "check", "merge", "flush", "retry", "index"]
    out = []
    for i in range(lines):
        name = rng.choice(names)
        out.append(f"    def {name}_{i}(self, value: int) -> int:  # line {i}")
        out.append(f"        return self.{rng.choice(names)}(value + {rng.randint(1, 99)})")
    return "\n".join(out)


def tool_output(rng: random.Random, tool: str, n: int) -> str:
    if tool == "read_file":
        return _code(rng, rng.randint(40, 300))
    if tool == "run_tests":
        if rng.random() < 0.6:
            return f"{rng.randint(20, 400)} passed in {rng.uniform(1, 30):.2f}s"
        trace = "\n".join(f"  File \"src/mod{n}.py\", line {i}, in f{i}" for i in range(40))
        return f"FAILED tests/test_{n}.py::test_case - AssertionError\n{trace}\n1 failed"
    if tool == "grep":
        return "\n".join(
            f"src/pkg/mod{rng.randint(1, 60)}.py:{rng.randint(1, 900)}: value = compute({i})"
            for i in range(rng.randint(3, 80))
        )
    if tool == "ls":
        return "\n".join(f"file_{i}.py" for i in range(rng.randint(2, 20)))
    rows = [{"id": i, "name": f"item{i}", "price": rng.randint(1, 999)} for i in range(200)]
    return json.dumps(rows[: rng.randint(20, 200)])


def build_session(tasks: int, seed: int, t0: float) -> tuple[list[Message], list[Any]]:
    """The chat messages and the ingest lines (user messages and tool pairs) of the session."""
    rng = random.Random(seed)
    tools = ["read_file", "run_tests", "grep", "ls", "http_get"]
    messages: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    lines: list[Any] = []
    ts, n = t0, 0
    for task in range(tasks):
        ask = f"Task {task}: fix issue #{100 + task} in module {task % 7}"
        messages.append({"role": "user", "content": ask})
        lines.append(("user", ask, ts))
        for _ in range(rng.randint(8, 24)):
            ts, n = ts + rng.uniform(2, 20), n + 1
            tool = rng.choice(tools)
            call_id, params = f"call_{n:05d}", {"arg": f"src/mod{n % 50}.py"}
            output = tool_output(rng, tool, n)
            call = {"id": call_id, "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(params)}}  # fmt: skip
            messages.append({"role": "assistant", "content": "Checking.", "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
            lines.append(ToolPair(call_id, tool, params, output, ts))
        messages.append({"role": "assistant", "content": f"Done with task {task}."})
        ts += 30
    messages.append({"role": "user", "content": "Summarise what changed today."})
    return messages, lines


async def ingest(offload: Offload, runner: InProcessRunner, lines: list[Any]) -> float:
    started = time.perf_counter()
    for line in lines:
        if isinstance(line, tuple):
            await offload.user_message(TENANT, SESSION, line[1], timestamp=line[2])
        else:
            await offload.ingest(TENANT, SESSION, [line])
    await runner.run(offload, flush=True)
    return time.perf_counter() - started


async def recoverable(
    offload: Offload, originals: dict[str, str], result: Compaction
) -> dict[str, float]:
    """Shares of tool results kept verbatim, and recoverable exactly by a ref the context names."""
    text = json.dumps(result.messages, ensure_ascii=False)
    verbatim = {
        m["tool_call_id"]
        for m in result.messages
        if m.get("role") == "tool" and m.get("content") == originals.get(m["tool_call_id"])
    }
    entries = {e.call_id: e for e in await offload.entries(TENANT, SESSION)}
    by_ref = set()
    for call_id, original in originals.items():
        entry = entries.get(call_id)
        if call_id in verbatim or entry is None or entry.ref_id not in text:
            continue
        back = await offload.read_back(TENANT, entry.ref_id, max_tokens=10**7)
        if back.text == original:
            by_ref.add(call_id)
    total = len(originals)
    return {
        "verbatim": round(len(verbatim) / total, 4),
        "by_ref_named_in_context": round(len(by_ref) / total, 4),
        "recoverable_exactly": round(len(verbatim | by_ref) / total, 4),
    }


def truncation_baseline(
    messages: list[Message], budget: int, originals: dict[str, str]
) -> dict[str, Any]:
    """Drop the oldest non-system messages until the context fits (no offload)."""
    kept = list(messages)
    while context_tokens(kept) > budget and len(kept) > 2:
        del kept[1]
    present = {m["tool_call_id"] for m in kept if m.get("role") == "tool"}
    return {"tokens_after": context_tokens(kept),
            "recoverable_exactly": round(len(present) / len(originals), 4)}  # fmt: skip


async def main(tasks: int, seed: int) -> dict[str, Any]:
    clock = ManualClock(1_800_000_000.0)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "bench.db")
        runner = InProcessRunner(clock)
        offload = Offload(SqlOffloadStore(store), runner, llm=None, clock=clock)
        messages, lines = build_session(tasks, seed, clock.now())
        originals = {p.call_id: p.output for p in lines if isinstance(p, ToolPair)}
        ingest_s = await ingest(offload, runner, lines)
        before = context_tokens(messages)
        report: dict[str, Any] = {
            "tasks": tasks, "messages": len(messages), "tool_results": len(originals),
            "tokens_before": before,
            "tool_result_tokens": sum(message_tokens(m) for m in messages if m["role"] == "tool"),
            "ingest_and_l1_s": round(ingest_s, 3), "levels": [],
        }  # fmt: skip
        for budget in [int(before / fill) for fill in FILLS] + [WINDOW_TOKENS]:
            fill = round(before / budget, 2)
            started = time.perf_counter()
            result = await offload.compact(TENANT, SESSION, messages, budget)
            elapsed_ms = (time.perf_counter() - started) * 1000
            report["levels"].append({
                "fill": fill, "budget_tokens": budget, "level": result.level.value,
                "tokens_after": result.tokens_after,
                "ratio_after_before": round(result.tokens_after / before, 4),
                "fits_budget": result.tokens_after <= budget,
                "replaced": len(result.replaced), "dropped_messages": result.dropped_messages,
                "compact_ms": round(elapsed_ms, 1),
                **await recoverable(offload, originals, result),
                "baseline_truncation": truncation_baseline(messages, budget, originals),
            })  # fmt: skip
        store.close()
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.tasks, args.seed)), indent=2))
