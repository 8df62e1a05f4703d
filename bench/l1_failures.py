"""What unreadable turns cost L1: LLM calls per captured turn, L1 runs and attempts, as the
share of turns a model cannot read grows (its reply to any batch holding one is cut off by the
length limit, as the real small model of the reply corpus did).

The LLM is the scripted OpenAI-compatible server (`stratamem.testing`): a cooperative model
(one memory per user turn) except for the unreadable turns. The session is flushed (L1 until
caught up; the batch of `max_batch_turns`, `l1_max_attempts` per run, both at their defaults
unless given). The baseline, measured in the same run, is the share 0: one call per batch.
Every turn ends covered or quarantined (checked); the figures say what that costs.

    .venv/bin/python bench/l1_failures.py [--turns 200] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import tempfile
from pathlib import Path
from typing import Any

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.layers.service import Run
from stratamem.llm import LLMClient, LLMSettings
from stratamem.store.failures.records import FailureKind, FailureQuery
from stratamem.testing import RecordedRequest, RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

SHARES = (0.0, 0.01, 0.05, 0.2, 1.0)
_TURN = re.compile(r"^\[(T\d+)\] .*? \(user\): (.*)$", re.MULTILINE)


def model(request: RecordedRequest) -> Reply:
    shown = _TURN.findall(str(request.messages[1]["content"]).split("NEW turns", 1)[-1])
    if any(text.endswith("(unreadable)") for _, text in shown):
        return Reply.truncated('{"memories": [{"type": "episodic", "content": "Maria')
    return Reply.json({"memories": [
        {"type": "episodic", "content": f"Maria said: {text}", "source_turn_ids": [alias]}
        for alias, text in shown
    ]})  # fmt: skip


async def measure(share: float, turns: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    bad = {i for i in range(turns) if rng.random() < share}
    texts = [f"I planted row {i} of the garden" + (" (unreadable)" if i in bad else "")
             for i in range(turns)]  # fmt: skip
    with ScriptedLLM() as server, tempfile.TemporaryDirectory() as tmp:
        install_layer_handlers(server)
        server.on("L1", model)
        llm = LLMClient(LLMSettings(base_url=server.base_url, model="scripted-chat"),
                        sleep=RecordingSleep())  # fmt: skip
        settings = Settings(data_dir=Path(tmp), embedder="none", background_embedding=False)
        memory = AsyncMemory.open(settings, clock=ManualClock(), llm=llm)
        try:
            await memory.capture("bench", "s1", [{"role": "user", "text": t} for t in texts])
            service = memory.layer_service()
            results = []
            for n in range(10 * turns):
                result = await service.run_l1(Run("bench", f"l1-{n}", "s1"))
                if result.skipped:
                    break
                results.append(result)
            assert memory.layers is not None
            query = FailureQuery(kind=FailureKind.QUARANTINE, limit=10 * turns)
            quarantined = len(memory.layers.list_failures(Scope("bench"), query))
        finally:
            await memory.aclose()
            await llm.aclose()
        calls = len(server.calls("L1"))
    assert quarantined == len(bad), (quarantined, len(bad))
    return {
        "share_unreadable": share,
        "unreadable": len(bad),
        "l1_runs": len(results),
        "attempts": sum(r.counts["attempts"] for r in results),
        "l1_calls": calls,
        "calls_per_turn": round(calls / turns, 3),
        "max_attempts_in_a_run": max(r.counts["attempts"] for r in results),
        "quarantined": quarantined,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rows = [await measure(share, args.turns, args.seed) for share in SHARES]
    base = rows[0]["l1_calls"]
    for row in rows:
        row["calls_vs_all_readable"] = round(row["l1_calls"] / base, 2)
    load = os.getloadavg()[0]
    print(json.dumps({"turns": args.turns, "load_1min": round(load, 2), "runs": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
