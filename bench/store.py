"""Store benchmark: hybrid search latency at 1k / 10k / 100k L1 records, and capture latency.

Prints JSON figures. Vectors of the stored records are random unit vectors of the local model's
dimension (embedding 100k texts with the model would take most of an hour on two cores and does
not change the cost of a search); the query is embedded by the real local model in the "with
embedding" figures. Baselines in the same run: BM25 alone and the vector scan alone.
"search_without_embedding" is the whole retrieval given the query vector (`hybrid_search` over
both layers with the product's `RetrievalConfig`: both retrievers, the feedback pass, fusion,
the preferences, loading the hits), the figure the ≤ 10 ms p95 target is about.

    python bench/store.py [--sizes 1000,10000,100000] [--queries 200] [--no-model]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from answers import require_filled  # bench/answers.py
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Scope
from stratamem.retrieval.search import SearchRequest, hybrid_search
from stratamem.store.core.port import Filters
from stratamem.store.sqlite import SqliteStore

# A Zipf-distributed vocabulary of 20,000 pseudo-words, like the words of real memories: a few
# very common, most rare. Queries draw from the same distribution.
_SYLLABLES = [c + v for c in "bcdfghjklmnpqrstvwxz" for v in "aeiou"]  # 100 syllables
WORDS = np.array(
    [
        "".join(_SYLLABLES[(i // 100**k) % 100] for k in range(3))
        for i in range(20_000)
    ]
)
_ZIPF = 1.0 / np.arange(1, len(WORDS) + 1) ** 1.07
_ZIPF /= _ZIPF.sum()
DIM = 384
SCOPE = Scope("bench")


def sentence(rng: np.random.Generator) -> str:
    words = rng.choice(WORDS, size=int(rng.integers(6, 14)), p=_ZIPF)
    return "The user " + " ".join(words)


def fill(store: SqliteStore, count: int, rng: np.random.Generator) -> None:
    batch = 5000
    for start in range(0, count, batch):
        memories = [
            MemoryRecord(
                id=f"m{i}",
                tenant=SCOPE.tenant,
                type=MemoryType.EPISODIC,
                content=sentence(rng),
                valid_from=1.7e9 + i,
                created_at=1.7e9 + i,
                updated_at=1.7e9 + i,
                mode=Mode.MANUAL,
            )
            for i in range(start, min(count, start + batch))
        ]
        store.upsert_memories(SCOPE, memories)
        vectors = rng.normal(size=(len(memories), DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.store_embeddings(Layer.L1, [(SCOPE.tenant, m.id) for m in memories], vectors)


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
    }


def timed(fn: Callable[[], Any], runs: int) -> dict[str, float]:
    fn()  # warm caches (vector cache load, page cache)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return percentiles(samples)


def search_figures(memory: AsyncMemory, size: int, queries: int, model: bool) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    store = memory.store
    # Queries lose their stop words (stratamem drops them, as any BM25 front end does): the
    # 100 most frequent pseudo-words play that part here.
    content = _ZIPF[100:] / _ZIPF[100:].sum()
    texts = [" ".join(rng.choice(WORDS[100:], size=4, p=content)) for _ in range(queries)]
    vectors = rng.normal(size=(queries, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    require_filled(store, f"{size} records", SCOPE, size, [" ".join(WORDS[:10])], vectors[0])
    it = iter(range(10**9))

    def bm25() -> None:
        store.search_text(SCOPE, Layer.L1, texts[next(it) % queries], Filters(), 50)

    def vector() -> None:
        store.search_vector(SCOPE, Layer.L1, vectors[next(it) % queries], Filters(), 50)

    def hybrid_given_vector() -> None:
        n = next(it) % queries
        store.search_text(SCOPE, Layer.L1, texts[n], Filters(), 50)
        store.search_vector(SCOPE, Layer.L1, vectors[n], Filters(), 50)

    loop = asyncio.new_event_loop()

    def search_given_vector() -> None:
        n = next(it) % queries
        request = SearchRequest(query=texts[n], k=10)
        loop.run_until_complete(
            hybrid_search(store, SCOPE, request, vectors[n], memory.retrieval)
        )

    figures: dict[str, Any] = {
        "records": size,
        "bm25_only": timed(bm25, queries),
        "vector_only": timed(vector, queries),
        "hybrid_without_embedding": timed(hybrid_given_vector, queries),
        "search_without_embedding": timed(search_given_vector, queries),
    }
    loop.close()
    if model:

        def full() -> None:
            asyncio.run(memory.search(SCOPE.tenant, texts[next(it) % queries], k=10))

        figures["hybrid_with_embedding"] = timed(full, min(queries, 100))
    return figures


def capture_figures(data_dir: Path, count: int) -> dict[str, Any]:
    settings = Settings(data_dir=data_dir, embedder="none")

    async def run() -> list[float]:
        memory = AsyncMemory.open(settings)
        samples = []
        for i in range(count):
            start = time.perf_counter()
            await memory.capture(
                "bench", f"s{i % 20}", [{"role": "user", "content": f"message number {i} " * 5}]
            )
            samples.append((time.perf_counter() - start) * 1000)
        await memory.aclose()
        return samples

    started = time.perf_counter()
    samples = asyncio.run(run())
    elapsed = time.perf_counter() - started
    return {"captures": count, "per_s": round(count / elapsed, 1), **percentiles(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--captures", type=int, default=2000)
    parser.add_argument("--no-model", action="store_true", help="skip the local model figures")
    args = parser.parse_args()
    results: dict[str, Any] = {"search": [], "capture": None}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            settings = Settings(
                data_dir=Path(tmp) / f"s{size}", embedder="none" if args.no_model else "local"
            )
            memory = AsyncMemory.open(settings, verify_embedding=False)
            fill(memory.store, size, np.random.default_rng(size))  # type: ignore[arg-type]
            results["search"].append(search_figures(memory, size, args.queries, not args.no_model))
            asyncio.run(memory.aclose())
        results["capture"] = capture_figures(Path(tmp) / "capture", args.captures)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
