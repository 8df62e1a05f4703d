"""The LoCoMo retrieval run: each sample into a fresh store, every probe searched and scored."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.config import Settings
from stratamem.core import AsyncMemory, retrieval_config
from stratamem.datasets.locomo import Sample
from stratamem.domain import Hit, Layer, Scope
from stratamem.embed import make_embedder
from stratamem.embed.base import Embedder
from stratamem.embed.cached import CachedEmbedder
from stratamem.errors import InvalidInput, LayerError, LLMError, Unavailable
from stratamem.eval.ingest import Ingested, Timer, ingest_sample
from stratamem.eval.metrics import QuestionResult, summarise
from stratamem.eval.qa import QAResult, answer_and_judge, qa_summary
from stratamem.eval.questions import Probe
from stratamem.llm import LLM, LLMSettings
from stratamem.retrieval.config import RetrievalConfig
from stratamem.store.failures.records import FailureQuery
from stratamem.store.layers.port import LayerStore

#: `raw`: search the captured turns. `offline` / `llm`: run the memory layers first.
MODES = ("raw", "offline", "llm")
DEFAULT_KS = (1, 5, 10, 20)


@dataclass(frozen=True, slots=True)
class EvalOptions:
    """What to run. `configs`: the retrieval variants every question is searched with, on the
    same ingested store (none: the memory's own, from the settings); the first is the one the
    report and the QA are about. `embed_cache`: a file that keeps every vector between runs."""

    mode: str = "raw"
    ks: tuple[int, ...] = DEFAULT_KS
    embedder: str = "none"
    settings: Settings = field(default_factory=Settings)
    configs: tuple[RetrievalConfig, ...] = ()
    embed_cache: Path | None = None


@dataclass(slots=True)
class SystemRun:
    """One system's measurement over the dataset."""

    name: str
    results: list[QuestionResult] = field(default_factory=list)
    by_config: dict[RetrievalConfig, list[QuestionResult]] = field(default_factory=dict)
    """Every retrieval variant's results; the first variant's list is `results`."""
    turns: int = 0
    capture_s: float = 0.0
    embed_s: float = 0.0
    layers_s: float = 0.0
    qa: list[QAResult] = field(default_factory=list)
    llm_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    llm_outcomes: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per stage: calls accepted, repaired, refused, truncated or failed (`llm.usage`)."""
    failures: LayerFailures | None = None
    embed_cache: dict[str, Any] | None = None
    """The embedding cache's file and how many texts it served (`hits`) or had embedded."""

    def summary(self, ks: Sequence[int]) -> dict[str, Any]:
        summary = summarise(self.results, ks)
        if self.qa:
            summary["qa"] = qa_summary(self.qa, self.llm_usage)
        if self.llm_usage:
            summary["llm_usage"] = self.llm_usage
        if self.llm_outcomes:
            summary["llm_outcomes"] = self.llm_outcomes
        if self.failures is not None:
            summary["failures"] = self.failures.to_json()
        if self.embed_cache is not None:
            summary["embed_cache"] = self.embed_cache
        summary.update(
            system=self.name,
            turns=self.turns,
            ingest_s=round(self.capture_s + self.embed_s + self.layers_s, 3),
            capture_s=round(self.capture_s, 3),
            embed_s=round(self.embed_s, 3),
            layers_s=round(self.layers_s, 3),
        )
        return summary


def require_mode(mode: str) -> None:
    """Fail clearly for a mode this configuration cannot run."""
    if mode not in MODES:
        raise InvalidInput(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "llm" and not LLMSettings().configured:
        raise Unavailable(
            "mode 'llm' runs the memory layers with an LLM: set STRATAMEM_LLM_BASE_URL and"
            " STRATAMEM_LLM_MODEL (any OpenAI-compatible chat API), or use --mode offline"
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


def open_embedder(spec: str, settings: Settings, cache: Path | None = None) -> Embedder | None:
    """The embedder `spec` names, wrapped in a persistent cache of its vectors when `cache`."""
    made = make_embedder(spec, base_url=settings.embed_base_url, api_key=settings.embed_api_key,
                         onnx_spinning=settings.onnx_spinning)  # fmt: skip
    if made is None or cache is None:
        return made
    return CachedEmbedder(made, cache)


async def run_stratamem(
    samples: Sequence[Sample],
    probes: Sequence[Probe],
    options: EvalOptions,
    timer: Timer = time.perf_counter,
    llm: LLM | None = None,
    answer: bool = False,
) -> SystemRun:
    """Ingest each sample into its own temporary store and search every probe of it. `llm`
    runs the layers in mode `llm`; with `answer`, it also answers each probe from its hits and
    judges the answer."""
    require_mode(options.mode)
    embedder = open_embedder(options.embedder, options.settings, options.embed_cache)
    shared = None if embedder is None else _Shared(embedder, timer)
    run = SystemRun(name="stratamem")
    configs = options.configs or (retrieval_config(options.settings),)
    run.by_config = {config: [] for config in configs}
    run.results = run.by_config[configs[0]]
    try:
        for sample in samples:
            mine = [p for p in probes if p.sample_id == sample.sample_id]
            asker = _Asker(options, timer, shared, llm, answer and llm is not None)
            await _run_sample(sample, mine, asker, run)
    finally:
        if embedder is not None:
            await embedder.aclose()
    if isinstance(embedder, CachedEmbedder):
        run.embed_cache = {
            "path": str(embedder.path), "hits": embedder.hits, "misses": embedder.misses
        }
    if llm is not None:
        run.llm_usage = llm.usage.snapshot()
        run.llm_outcomes = llm.usage.outcomes()
    return run


async def _run_sample(
    sample: Sample, probes: Sequence[Probe], asker: _Asker, run: SystemRun
) -> None:
    with tempfile.TemporaryDirectory(prefix="stratamem-eval-") as tmp:
        settings = asker.options.settings.model_copy(
            update={"data_dir": Path(tmp), "background_embedding": False}
        )
        layers_llm = asker.llm if asker.options.mode == "llm" else None
        memory = AsyncMemory.open(settings, embedder=asker.embedder, llm=layers_llm)
        try:
            ingested = await ingest_sample(memory, sample, asker.timer)
            run.turns += ingested.turns
            run.capture_s += ingested.capture_s
            run.embed_s += ingested.embed_s
            if asker.options.mode != "raw":
                run.failures = run.failures or LayerFailures()
                run.layers_s += await run_layers(memory, sample, asker.timer, run.failures)
            context = _Sample(memory, ingested, " and ".join(sample.speakers))
            for probe in probes:
                await asker.ask(context, probe, run)
        finally:
            await memory.aclose()


async def run_layers(
    memory: AsyncMemory, sample: Sample, timer: Timer, failures: LayerFailures | None = None
) -> float:
    """Flush every session through the memory layers (L1, L2, L3), embed what they made, and
    return the seconds it took. A flush that fails (an L2 or L3 reply still unusable after its
    repair round, the endpoint down) is counted in `failures` and the next session goes on; the
    failure records the layers kept (quarantined turns, rejected batches, dropped items …)
    are counted there too."""
    started = timer()
    for session in sample.sessions:
        try:
            await memory.flush(sample.sample_id, session)
        except (LayerError, LLMError) as exc:
            if failures is None:
                raise
            failures.stopped.append(f"{sample.sample_id}/{session}: {type(exc).__name__}: {exc}")
    await memory.embed_pending()
    if failures is not None and memory.layers is not None:
        await failures.count(memory.layers, Scope(sample.sample_id))
    return timer() - started


@dataclass(slots=True)
class LayerFailures:
    """The layers' failure records over a run, by stage and kind, and the flushes that stopped
    on an error."""

    by_stage: dict[str, dict[str, int]] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)

    async def count(self, layers: LayerStore, scope: Scope) -> None:
        offset = 0
        while True:
            query = FailureQuery(limit=_PAGE, offset=offset)
            page = await asyncio.to_thread(layers.list_failures, scope, query)
            for failure in page:
                kinds = self.by_stage.setdefault(failure.stage, {})
                kinds[failure.kind.value] = kinds.get(failure.kind.value, 0) + 1
            if len(page) < _PAGE:
                return
            offset += _PAGE

    def to_json(self) -> dict[str, Any]:
        return {
            "by_stage": {stage: dict(sorted(kinds.items()))
                         for stage, kinds in sorted(self.by_stage.items())},
            "stopped_flushes": len(self.stopped),
            "stopped": self.stopped[:_STOPPED_SHOWN],
        }  # fmt: skip


_PAGE = 500
_STOPPED_SHOWN = 20


@dataclass(slots=True)
class _Sample:
    memory: AsyncMemory
    ingested: Ingested
    speakers: str
    dialogue: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.dialogue = {turn: dia for dia, turn in self.ingested.turn_ids.items()}


@dataclass(frozen=True, slots=True)
class _Asker:
    options: EvalOptions
    timer: Timer
    embedder: _Shared | None
    llm: LLM | None
    answer: bool

    async def ask(self, sample: _Sample, probe: Probe, run: SystemRun) -> None:
        """Search `probe` with every retrieval variant (timed, the query embedding apart),
        score it, and answer it from the first variant's hits."""
        found = []
        for config, results in run.by_config.items():
            sample.memory.retrieval = config
            found.append(await self._search(sample, probe, results))
        if self.answer and self.llm is not None:
            question = probe.question
            run.qa.append(
                await answer_and_judge(
                    self.llm, question.question, question.answer, question.category, found[0],
                    sample.speakers,
                )
            )

    async def _search(
        self, sample: _Sample, probe: Probe, results: list[QuestionResult]
    ) -> list[Hit]:
        embedded_s = 0.0 if self.embedder is None else self.embedder.spent_s
        started = self.timer()
        hits = await sample.memory.search(
            sample.ingested.tenant, probe.question.question, k=max(self.options.ks)
        )
        latency_ms = (self.timer() - started) * 1000.0
        embed_ms = 0.0 if self.embedder is None else (self.embedder.spent_s - embedded_s) * 1e3
        results.append(_result(probe, hits, sample.dialogue, latency_ms, embed_ms))
        return hits


def _result(
    probe: Probe, hits: Sequence[Hit], dialogue: dict[str, str], latency_ms: float, embed_ms: float
) -> QuestionResult:
    return QuestionResult(
        sample_id=probe.sample_id,
        category=probe.question.category,
        question=probe.question.question,
        evidence=probe.evidence,
        ranked=tuple(_covered(hit, dialogue) for hit in hits),
        hit_chars=tuple(len(hit.text) for hit in hits),
        latency_ms=latency_ms,
        embed_ms=embed_ms,
    )


def _covered(hit: Hit, dialogue: dict[str, str]) -> frozenset[str]:
    """The dialogue ids a hit stands for: a turn itself, or an L1 memory's provenance."""
    turns = (hit.id,) if hit.layer is Layer.L0 else hit.source_turn_ids
    return frozenset(dialogue[t] for t in turns if t in dialogue)
