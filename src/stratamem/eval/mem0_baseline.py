"""mem0 (open-source, `infer=False`) on the same LoCoMo data, for a side-by-side.

mem0 is configured as close to stratamem's raw mode as it allows: every turn stored verbatim
(`infer=False`, so no LLM is called), embedded with the same local all-MiniLM-L6-v2 through its
huggingface embedder, kept in its default local vector store (Qdrant, embedded, in a temporary
directory). Its home directory is a temporary directory and its telemetry is off; Hugging Face
is told to stay offline. mem0 reads those settings from the environment when it is first
imported, so they are set before the import.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stratamem.datasets.locomo import Sample
from stratamem.embed.local import package_model_dir
from stratamem.errors import EmbeddingError, Unavailable
from stratamem.eval.ingest import Timer, normalise_dia_id
from stratamem.eval.metrics import QuestionResult
from stratamem.eval.questions import Probe
from stratamem.eval.runner import EvalOptions, SystemRun

MODEL_DIM = 384
_OFFLINE_ENV = {
    "MEM0_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


_EXTRA_HINT = "the mem0 baseline needs the mem0 extra (torch): make setup-st, see README"


def _model_path() -> str:
    """The local model's files, which mem0 loads with sentence-transformers (and torch)."""
    if importlib.util.find_spec("sentence_transformers") is None:
        raise Unavailable(f"sentence-transformers is missing; {_EXTRA_HINT}")
    try:
        return str(package_model_dir())
    except EmbeddingError as exc:
        raise Unavailable(str(exc)) from exc


def _memory_class(home: Path) -> Any:
    """mem0's `Memory`, imported after its environment points at `home` with telemetry off."""
    if "mem0" not in sys.modules:
        os.environ.update(_OFFLINE_ENV)
        os.environ["MEM0_DIR"] = str(home)
    try:
        module = importlib.import_module("mem0")
        telemetry = importlib.import_module("mem0.memory.telemetry")
    except ImportError as exc:
        raise Unavailable(f"mem0 is missing; {_EXTRA_HINT}") from exc
    if telemetry.MEM0_TELEMETRY is not False:
        raise Unavailable(
            "mem0 was imported with telemetry on: set MEM0_TELEMETRY=False before starting"
        )
    return module.Memory


def _config(directory: Path, model_path: str) -> dict[str, Any]:
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "locomo",
                "path": str(directory / "qdrant"),
                "embedding_model_dims": MODEL_DIM,
                "on_disk": True,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": model_path, "embedding_dims": MODEL_DIM},
        },
        # Required by mem0's config, never called with infer=False.
        "llm": {"provider": "openai", "config": {"api_key": "unused", "model": "unused"}},
        "history_db_path": str(directory / "history.db"),
    }


def run_mem0(
    samples: Sequence[Sample],
    probes: Sequence[Probe],
    options: EvalOptions,
    timer: Timer = time.perf_counter,
) -> SystemRun:
    """Ingest each sample into its own mem0 store (user id = sample id) and search each probe."""
    run = SystemRun(name="mem0")
    model_path = _model_path()
    with tempfile.TemporaryDirectory(prefix="stratamem-mem0-") as tmp:
        memory_class = _memory_class(Path(tmp) / "home")
        for sample in samples:
            directory = Path(tmp) / sample.sample_id
            memory = memory_class.from_config(_config(directory, model_path))
            _ingest(memory, sample, timer, run)
            spent = _time_embedding(memory, timer)
            mine = [p for p in probes if p.sample_id == sample.sample_id]
            run.results.extend(_ask(memory, p, max(options.ks), timer, spent) for p in mine)
            memory.vector_store.client.close()
    return run


def _ingest(memory: Any, sample: Sample, timer: Timer, run: SystemRun) -> None:
    started = timer()
    for messages in sample.sessions.values():
        for message in messages:
            content = f"{message['speaker']}: {message['text']}"
            memory.add(
                [{"role": "user", "content": content, "name": message["speaker"]}],
                user_id=sample.sample_id,
                metadata={"dia_id": normalise_dia_id(str(message["id"]))},
                infer=False,
            )
            run.turns += 1
    run.embed_s += timer() - started


def _time_embedding(memory: Any, timer: Timer) -> list[float]:
    """Wrap mem0's embedder so the seconds it spends add up in the returned one-item list."""
    spent = [0.0]
    inner = memory.embedding_model.embed

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = timer()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += timer() - started

    memory.embedding_model.embed = timed
    return spent


def _ask(memory: Any, probe: Probe, k: int, timer: Timer, spent: list[float]) -> QuestionResult:
    started, embedding_before = timer(), spent[0]
    found = memory.search(
        probe.question.question, top_k=k, filters={"user_id": probe.sample_id}, threshold=0.0
    )
    latency_ms = (timer() - started) * 1000.0
    hits = found["results"]
    return QuestionResult(
        sample_id=probe.sample_id,
        category=probe.question.category,
        question=probe.question.question,
        evidence=probe.evidence,
        ranked=tuple(frozenset([str((h.get("metadata") or {}).get("dia_id"))]) for h in hits),
        hit_chars=tuple(len(str(h.get("memory", ""))) for h in hits),
        latency_ms=latency_ms,
        embed_ms=(spent[0] - embedding_before) * 1000.0,
    )
