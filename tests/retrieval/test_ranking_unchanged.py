"""The whole search ranks a fixed corpus as it did when its speed work began (issue 32).

Refactors for speed (the fusions, the feedback pass, the vector cache) must not move a hit: this
corpus of turns by three speakers over eight sessions, and manual memories, is searched by 40
queries under the product's defaults and with the per-session list on, and every query's top 20
(hit, fused score, retriever ranks) must equal what the search gave at e260b8d
(`data/ranking_e260b8d.json`), regenerated once since: equal cosines, which this embedder gives
often, ranked in an order that depended on the CPU (store/core/vectors.py), now by record. A
change meant to move the ranking regenerates the file with
`python tests/retrieval/test_ranking_unchanged.py` and says why, with its recall figures.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.retrieval.config import RetrievalConfig

EXPECTED = Path(__file__).parent / "data" / "ranking_e260b8d.json"
SPEAKERS = ("Nate", "Joanna", "Priya")
_WORDS = (
    "turtles tank lamp movie screenplay draft lake weather garden spring running marathon "
    "coffee bakery bread violin concert painting canvas museum train station ticket holiday "
    "beach camping tent forest hiking boots dinner recipe pasta birthday party cake guitar "
    "lesson teacher school exam library novel chapter puppy walk park bicycle repair shop "
    "job interview office manager promotion family sister brother wedding dress photos"
)
WORDS = _WORDS.split()
CONFIGS = {"defaults": RetrievalConfig(), "sessions": RetrievalConfig(session_weight=0.05)}


def corpus() -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    """(session, speaker, text) turns, memory texts and queries, the same on every run."""
    rng = random.Random(32)
    turns = []
    for session in range(8):
        for _ in range(25):
            words = rng.sample(WORDS[: 20 + 5 * session], rng.randint(4, 9))
            text = f"I {' '.join(words[:3])}. Then {' '.join(words[3:])} with you."
            turns.append((f"s{session}", rng.choice(SPEAKERS), text))
    memories = [f"The user likes {' '.join(rng.sample(WORDS, 3))}." for _ in range(30)]
    queries = [
        f"What {' '.join(rng.sample(WORDS, rng.randint(1, 3)))} did "
        f"{rng.choice([*SPEAKERS, 'they'])} mention?"
        for _ in range(40)
    ]
    return turns, memories, queries


async def rankings(data_dir: Path) -> dict[str, Any]:
    settings = Settings(data_dir=data_dir, embedder="hash", max_turn_chars=1000)
    memory = AsyncMemory.open(settings, clock=ManualClock())
    turns, memories, queries = corpus()
    labels: dict[str, str] = {}
    try:
        for i, (session, speaker, text) in enumerate(turns):
            message = {"role": "user", "speaker": speaker, "content": text}
            await memory.capture("acme", session, [message])
            labels[text] = f"turn {i}"
        for i, text in enumerate(memories):
            await memory.add_memory("acme", text, type="episodic")
            labels[text] = f"memory {i}"
        await memory.embed_pending()
        found: dict[str, Any] = {}
        for name, config in CONFIGS.items():
            memory.retrieval = config
            found[name] = [
                [
                    [labels[h.text], round(h.score, 9), sorted(h.ranks.items())]
                    for h in await memory.search("acme", query, k=20)
                ]
                for query in queries
            ]
        return found
    finally:
        await memory.aclose()


async def test_the_fixed_corpus_ranks_as_it_did(tmp_path: Path) -> None:
    found = json.loads(json.dumps(await rankings(tmp_path / "data")))
    expected = json.loads(EXPECTED.read_text())
    for name in CONFIGS:
        for query, got, want in zip(corpus()[2], found[name], expected[name], strict=True):
            assert got == want, (name, query)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        found = asyncio.run(rankings(Path(tmp)))
    lines = [
        f"{json.dumps(name)}: [\n" + ",\n".join(json.dumps(query) for query in queries) + "\n]"
        for name, queries in found.items()
    ]
    EXPECTED.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {EXPECTED}", file=sys.stderr)
