"""The LoCoMo retrieval run: each sample into a fresh store, every probe searched and scored."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.datasets.locomo import Sample
from stratamem.domain import Hit, Layer
from stratamem.embed import make_embedder
from stratamem.embed.base import Embedder
from stratamem.errors import Unavailable
from stratamem.eval.ingest import Timer, ingest_sample
from stratamem.eval.metrics import QuestionResult, summarise
from stratamem.eval.questions import Probe

#: `raw`: search the captured turns. `offline` / `llm`: run the memory layers first.
MODES = ("raw", "offline", "llm")
DEFAULT_KS = (1, 5, 10, 20)


@dataclass(frozen=True, slots=True)
class EvalOptions:
    mode: str = "raw"
    ks: tuple[int, ...] = DEFAULT_KS
    embedder: str = "none"
    settings: Settings = field(default_factory=Settings)


@dataclass(slots=True)
class SystemRun:
    """One system's measurement over the dataset."""

    name: str
    results: list[QuestionResult] = field(default_factory=list)
    turns: int = 0
    capture_s: float = 0.0
    embed_s: float = 0.0

    def summary(self, ks: Sequence[int]) -> dict[str, Any]:
        summary = summarise(self.results, ks)
        summary.update(
            system=self.name,
            turns=self.turns,
            ingest_s=round(self.capture_s + self.embed_s, 3),
            capture_s=round(self.capture_s, 3),
            embed_s=round(self.embed_s, 3),
        )
        return summary


def require_mode(mode: str) -> None:
    """Fail clearly for a mode this build cannot run."""
    if mode not in MODES:
        raise Unavailable(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if mode != "raw":
        raise Unavailable(
            f"mode {mode!r} needs the memory layers (L1 extraction), which are not available"
            " in this build yet: use --mode raw"
        )


class _Shared:
    """An embedder shared by every sample's memory (closing a memory must not close it) that
    adds up the time spent embedding, so a search's time can be split."""

    def __init__(self, inner: Embedder, timer: Timer) -> None:
        self.inner = inner
        self.model = inner.model
        self.dim = inner.dim
        self.timer = timer
        self.spent_s = 0.0

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        started = self.timer()
        try:
            return await self.inner.embed(texts)
        finally:
            self.spent_s += self.timer() - started

    async def aclose(self) -> None:
        return None


def open_embedder(spec: str, settings: Settings) -> Embedder | None:
    return make_embedder(spec, base_url=settings.embed_base_url, api_key=settings.embed_api_key)


async def run_stratamem(
    samples: Sequence[Sample],
    probes: Sequence[Probe],
    options: EvalOptions,
    timer: Timer = time.perf_counter,
) -> SystemRun:
    """Ingest each sample into its own temporary store and search every probe of it."""
    require_mode(options.mode)
    embedder = open_embedder(options.embedder, options.settings)
    shared = None if embedder is None else _Shared(embedder, timer)
    run = SystemRun(name="stratamem")
    try:
        for sample in samples:
            mine = [p for p in probes if p.sample_id == sample.sample_id]
            await _run_sample(sample, mine, shared, options, timer, run)
    finally:
        if embedder is not None:
            await embedder.aclose()
    return run


async def _run_sample(
    sample: Sample,
    probes: Sequence[Probe],
    embedder: _Shared | None,
    options: EvalOptions,
    timer: Timer,
    run: SystemRun,
) -> None:
    with tempfile.TemporaryDirectory(prefix="stratamem-eval-") as tmp:
        settings = options.settings.model_copy(
            update={"data_dir": Path(tmp), "background_embedding": False}
        )
        memory = AsyncMemory.open(settings, embedder=embedder)
        try:
            ingested = await ingest_sample(memory, sample, timer)
            run.turns += ingested.turns
            run.capture_s += ingested.capture_s
            run.embed_s += ingested.embed_s
            dialogue = {turn: dia for dia, turn in ingested.turn_ids.items()}
            for probe in probes:
                spent_s = 0.0 if embedder is None else embedder.spent_s
                result = await _ask(memory, ingested.tenant, dialogue, probe, options, timer)
                if embedder is not None:
                    result = replace(result, embed_ms=(embedder.spent_s - spent_s) * 1000.0)
                run.results.append(result)
        finally:
            await memory.aclose()


async def _ask(
    memory: AsyncMemory,
    tenant: str,
    dialogue: dict[str, str],
    probe: Probe,
    options: EvalOptions,
    timer: Timer,
) -> QuestionResult:
    started = timer()
    hits = await memory.search(tenant, probe.question.question, k=max(options.ks))
    latency_ms = (timer() - started) * 1000.0
    return QuestionResult(
        sample_id=probe.sample_id,
        category=probe.question.category,
        question=probe.question.question,
        evidence=probe.evidence,
        ranked=tuple(_covered(hit, dialogue) for hit in hits),
        hit_chars=tuple(len(hit.text) for hit in hits),
        latency_ms=latency_ms,
    )


def _covered(hit: Hit, dialogue: dict[str, str]) -> frozenset[str]:
    """The dialogue ids a hit stands for: a turn itself, or an L1 memory's provenance."""
    turns = (hit.id,) if hit.layer is Layer.L0 else hit.source_turn_ids
    return frozenset(dialogue[t] for t in turns if t in dialogue)
