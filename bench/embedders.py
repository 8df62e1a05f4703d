"""The local embedder on ONNX Runtime (the default q8 graph, fp32 and int8) against
sentence-transformers on torch, in one run: every figure issue 14 asks for.

- vectors: cosine of each embedder's vectors to sentence-transformers' over the LoCoMo dev turns
  (min, mean);
- batch: every turn embedded once, in batches of 32: texts per second (wall), the process's CPU
  seconds, and the ratio to sentence-transformers;
- query: one question at a time, warm: p50 / p95 ms, the embedders taking turns in blocks;
- recall: `stratamem eval locomo --mode raw` recall@10 (and @5, MRR) with each embedder.

Needs the `st` extra (`make setup-st`) for the reference and LoCoMo's dev split (not shipped:
CC BY-NC). Run it under `nice` on a shared machine and read the ratios: they come from one run.

    python bench/embedders.py [--data ../shared/data/locomo/locomo_dev.json] [--queries 200]
                              [--no-recall] [--limit-samples N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.config import Settings
from stratamem.datasets import locomo
from stratamem.embed import Embedder, make_embedder
from stratamem.eval.questions import select
from stratamem.eval.runner import EvalOptions, run_stratamem

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/locomo/locomo_dev.json"
SPECS = ("st", "local", "local:fp32", "local:int8")
"""sentence-transformers first: the baseline every ratio is against."""
BATCH = 32


def turn_texts(samples: Sequence[locomo.Sample]) -> list[str]:
    return [locomo.turn_text(t) for s in samples for turns in s.sessions.values() for t in turns]


async def timed_batch(embedder: Embedder, texts: list[str]) -> tuple[np.ndarray, float, float]:
    """All `texts` once: the vectors, wall seconds and this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = await embedder.embed(texts)
    return vectors, time.perf_counter() - wall, time.process_time() - cpu


QUERY_BLOCK = 50
"""Queries per turn of one embedder in the query phase (see `query_latencies`)."""


async def query_latencies(embedders: dict[str, Embedder], queries: list[str]) -> dict[str, Any]:
    """One query at a time, warm, p50 / p95 ms per embedder. The embedders take turns in blocks
    of `QUERY_BLOCK` queries (the order reversed every round) until each has run every query
    twice, so a slow spell of a shared machine falls on all of them alike."""
    samples: dict[str, list[float]] = {spec: [] for spec in embedders}
    order = list(embedders.items())
    blocks = [queries[i : i + QUERY_BLOCK] for i in range(0, len(queries), QUERY_BLOCK)] * 2
    for round_number, block in enumerate(blocks):
        for spec, embedder in order if round_number % 2 == 0 else order[::-1]:
            for query in block:
                started = time.perf_counter()
                await embedder.embed([query])
                samples[spec].append((time.perf_counter() - started) * 1000)
    return {spec: _percentiles(values) for spec, values in samples.items()}


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
    }


async def measure(spec: str, texts: list[str]) -> tuple[Embedder, dict[str, Any]]:
    """The embedder loaded (kept open for the query phase), its load and batch figures."""
    embedder = make_embedder(spec, batch_size=BATCH, onnx_spinning=Settings().onnx_spinning)
    assert embedder is not None
    load_wall, load_cpu = time.perf_counter(), time.process_time()
    await embedder.embed(["warm-up"])
    figures: dict[str, Any] = {
        "model": embedder.model,
        "load_s": round(time.perf_counter() - load_wall, 2),
        "load_cpu_s": round(time.process_time() - load_cpu, 2),
    }
    vectors, wall_s, cpu_s = await timed_batch(embedder, texts)
    figures["batch"] = {"texts": len(texts), "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2),
                        "texts_per_s": round(len(texts) / wall_s, 1)}  # fmt: skip
    figures["vectors"] = vectors
    return embedder, figures


async def recall(spec: str, samples: list[locomo.Sample]) -> dict[str, Any]:
    options = EvalOptions(mode="raw", ks=(5, 10), embedder=spec)
    run = await run_stratamem(samples, select(samples).probes, options)
    summary = run.summary(options.ks)
    at_k = summary["recall_at_k"]
    return {"recall_at_5": at_k["5"], "recall_at_10": at_k["10"], "mrr": summary["mrr"],
            "questions": summary["questions"]}  # fmt: skip


def cosines(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    values = np.sum(vectors.astype(np.float64) * reference, axis=1)
    return {"min": round(float(values.min()), 5), "mean": round(float(values.mean()), 5)}


def ratios(results: dict[str, dict[str, Any]]) -> None:
    """Each embedder against sentence-transformers, added to its figures."""
    base = results["st"]
    for spec, figures in results.items():
        figures["vs_st"] = {
            "cosine": cosines(figures.pop("vectors"), base["vectors"]) if spec != "st" else None,
            "throughput": round(figures["batch"]["texts_per_s"] / base["batch"]["texts_per_s"], 2),
            "cpu": round(figures["batch"]["cpu_s"] / base["batch"]["cpu_s"], 2),
            "query_p50": round(figures["query"]["p50_ms"] / base["query"]["p50_ms"], 2),
        }
        if "recall" in figures and "recall" in base:
            delta = figures["recall"]["recall_at_10"] - base["recall"]["recall_at_10"]
            figures["vs_st"]["recall_at_10_delta"] = round(delta, 4)
    base.pop("vectors")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    samples = locomo.load(args.data)[: args.limit_samples]
    texts = turn_texts(samples)
    queries = [p.question.question for p in select(samples).probes][: args.queries]
    results: dict[str, dict[str, Any]] = {}
    embedders: dict[str, Embedder] = {}
    for spec in SPECS:
        embedders[spec], results[spec] = await measure(spec, texts)
        if not args.no_recall:
            results[spec]["recall"] = await recall(spec, samples)
    for spec, latency in (await query_latencies(embedders, queries)).items():
        results[spec]["query"] = latency
    for embedder in embedders.values():
        await embedder.aclose()
    ratios(results)
    return {"load_average": [round(x, 2) for x in os.getloadavg()], "cores": os.cpu_count(),
            "data": str(args.data), "embedders": results}  # fmt: skip


def report(figures: dict[str, Any]) -> None:
    print(f"load average {figures['load_average']} on {figures['cores']} cores")
    for spec, f in figures["embedders"].items():
        vs = f["vs_st"]
        cosine = vs["cosine"] or {"min": 1.0, "mean": 1.0}
        batch = f["batch"]
        line = (f"{spec:11} load {f['load_s']:5.2f} s (cpu {f['load_cpu_s']:.2f})"
                f" | batch {batch['texts_per_s']:6.1f} texts/s, cpu {batch['cpu_s']:.1f} s"
                f" (x{vs['throughput']} throughput, x{vs['cpu']} cpu vs st)"
                f" | query p50 {f['query']['p50_ms']} ms p95 {f['query']['p95_ms']} ms"
                f" | cosine to st min {cosine['min']} mean {cosine['mean']}")  # fmt: skip
        if "recall" in f:
            r = f["recall"]
            line += f" | R@10 {r['recall_at_10']} R@5 {r['recall_at_5']} MRR {r['mrr']}"
            line += f" ({vs.get('recall_at_10_delta', 0):+.4f} vs st)"
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-recall", action="store_true")
    parser.add_argument("--limit-samples", type=int, default=None, help="a quick look only")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    result = asyncio.run(main(arguments))
    print(json.dumps(result, indent=2)) if arguments.json else report(result)
