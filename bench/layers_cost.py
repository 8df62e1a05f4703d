"""What the memory layers cost for 100 captured turns: LLM calls and tokens per stage, and the
characters a recall adds to a prompt.

The LLM is the scripted OpenAI-compatible server (`stratamem.testing`), answering like a
cooperative model from what each prompt shows; calls and tokens are counted by the server
(prompt tokens estimated at 4 characters per token, as the server does when a reply does not
state them). Turns arrive 30 s apart on a manual clock; the layers run on the schedule of
`stratamem.layers.scheduling` (L1 warm-up 1, 2, 4, then every 8 turns; L2 no sooner than 60 s
after an L1 and 300 s after the last L2, and only when enough changed: 8 novel memories or 24
of any kind; L3 after an L2 that changed scenes when 16 memories came since the last L3), then
a flush at session end. Baselines measured in the same run: one flush at the end only, and the
offline mode.

    .venv/bin/python bench/layers_cost.py [--turns 100] [--gap-s 30]

`--gap-s 60`: turns a minute apart, so an L1 (eight turns) writes memories eight minutes apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.layers import scheduling
from stratamem.layers.service import LayerService, Run
from stratamem.llm import LLMClient, LLMSettings
from stratamem.testing import RecordingSleep, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

START = 1_715_166_000.0
GAP_S = 30.0
FACTS = [
    "I'm a nurse at the children's hospital", "I live in Lisbon with my partner Ana",
    "I ran a half marathon yesterday", "my favourite food is grilled sardines",
    "I started learning the cello last month", "we adopted a cat called Miso two days ago",
    "I prefer short answers with bullet points", "my sister Joana is getting married in June",
    "I switched to night shifts last week", "I'm allergic to peanuts",
    "I visited Porto last Friday", "I want to run a full marathon next year",
]  # fmt: skip
QUERIES = ["what food does she like", "marathon training", "family news", "how to answer her"]


def conversation(turns: int, gap_s: float = GAP_S) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        stamp = START + i * gap_s
        if i % 2 == 0:
            fact = FACTS[(i // 2) % len(FACTS)]
            text = f"{fact}. By the way, round {i // 2 + 1}."
            out.append({"role": "user", "speaker": "Maria", "text": text, "timestamp": stamp})
        else:
            out.append({"role": "assistant", "text": "Noted, thank you!", "timestamp": stamp})
    return out


async def open_memory(data: Path, clock: ManualClock, server: ScriptedLLM | None) -> AsyncMemory:
    llm = None
    if server is not None:
        llm_settings = LLMSettings(base_url=server.base_url, model="scripted-chat")
        llm = LLMClient(llm_settings, sleep=RecordingSleep())
    settings = Settings(data_dir=data, embedder="hash:256", background_embedding=False)
    return AsyncMemory.open(settings, clock=clock, llm=llm)


async def scheduled(memory: AsyncMemory, clock: ManualClock, turns: list[dict[str, Any]]) -> None:
    """Capture turn by turn; run each layer when the schedule says so; flush at the end."""
    service = memory.layer_service()
    assert memory.layers is not None
    for n, turn in enumerate(turns):
        clock.set(turn["timestamp"])
        await memory.capture("bench", "s1", [turn])
        state = memory.layers.session_state(Scope("bench"), "s1")
        if scheduling.l1_trigger(state, clock.now(), service.settings) is not None:
            await service.run_l1(Run("bench", f"l1-{n}", "s1"))
        await maybe_l2(service, memory, clock, n)
    await service.flush("bench", "s1", task_id="end")


async def maybe_l2(service: LayerService, memory: AsyncMemory, clock: ManualClock, n: int) -> None:
    assert memory.layers is not None
    scope = Scope("bench")
    state = memory.layers.session_state(scope, "s1")
    tenant = memory.layers.tenant_state(scope)
    if state.last_l1_at is None or state.last_l1_at <= (tenant.last_l2_at or 0):
        return
    if scheduling.l2_earliest(state, tenant, service.settings) > clock.now():
        return
    if not await service.l2_worth_running(scope):  # as the pipeline's L2 executor decides
        return
    l2 = await service.run_l2(Run("bench", f"l2-{n}", "s1"))
    if l2.changed and await service.l3_worth_running(scope):
        await service.run_l3(Run("bench", f"l3-{n}"))


async def recall_cost(memory: AsyncMemory) -> dict[str, float]:
    context = stable = 0
    for query in QUERIES:
        result = await memory.recall("bench", query)
        context += len(result.context)
        stable += len(result.stable)
    return {"context_chars": context / len(QUERIES), "stable_chars": stable / len(QUERIES)}


async def measure(turns: int, mode: str, gap_s: float = GAP_S) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ScriptedLLM() as server:
        install_layer_handlers(server)
        clock = ManualClock(START)
        memory = await open_memory(Path(tmp), clock, None if mode == "offline" else server)
        data = conversation(turns, gap_s)
        if mode == "flush-only":
            await memory.capture("bench", "s1", data)
            clock.set(data[-1]["timestamp"])
            await memory.flush("bench", "s1")
        else:
            await scheduled(memory, clock, data)
        result = {
            "mode": mode,
            "usage": server.usage(),
            "memories": len(memory.store.list_memories(Scope("bench"), limit=1000)),
            "recall": await recall_cost(memory),
        }
        llm = memory.llm
        await memory.aclose()
        if llm is not None:
            await llm.aclose()
        return result


def totals(usage: dict[str, dict[str, int]]) -> dict[str, int]:
    keys = ("calls", "prompt_tokens", "completion_tokens")
    return {k: sum(stage[k] for stage in usage.values()) for k in keys}


async def main(turns: int, gap_s: float) -> None:
    modes = ("scheduled", "flush-only", "offline")
    runs = [await measure(turns, mode, gap_s) for mode in modes]
    scheduled_total, flush_total = totals(runs[0]["usage"]), totals(runs[1]["usage"])
    report = {
        "turns": turns,
        "gap_s": gap_s,
        "runs": runs,
        "ratios": {
            "calls_scheduled_vs_flush_only": round(
                scheduled_total["calls"] / flush_total["calls"], 2
            ),
            "prompt_tokens_scheduled_vs_flush_only": round(
                scheduled_total["prompt_tokens"] / flush_total["prompt_tokens"], 2
            ),
            "recall_chars_llm_vs_offline": round(
                sum(runs[0]["recall"].values()) / sum(runs[2]["recall"].values()), 2
            ),
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--gap-s", type=float, default=GAP_S, help="Seconds between turns.")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.gap_s))
