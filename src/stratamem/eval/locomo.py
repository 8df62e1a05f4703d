"""`evaluate_locomo`: load, select, run stratamem (and a baseline), assemble the report."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratamem.datasets import locomo
from stratamem.errors import InvalidInput, Unavailable
from stratamem.eval.chart import write_chart
from stratamem.eval.cv import cross_validate
from stratamem.eval.cv_report import cv_markdown
from stratamem.eval.mem0_baseline import run_mem0
from stratamem.eval.questions import select
from stratamem.eval.report import markdown, ratios
from stratamem.eval.runner import EvalOptions, require_mode, run_stratamem
from stratamem.llm import LLMClient, LLMSettings
from stratamem.retrieval.config import varying

BASELINES = ("mem0",)
REPORT_NAME = "report.md"
CHART_NAME = "recall.png"
JSON_NAME = "report.json"


@dataclass(frozen=True, slots=True)
class LocomoRequest:
    data: Path
    options: EvalOptions
    limit_samples: int | None = None
    baseline: str | None = None
    qa: bool = False
    cv: bool = False
    """Also cross-validate the variants of `options.configs` (`cv.py`), one conversation out."""
    select_k: int = 10
    """The recall@k the cross-validation chooses variants by."""


def check(request: LocomoRequest) -> None:
    """Refuse, before any work, what this build cannot do."""
    require_mode(request.options.mode)
    if request.qa and not LLMSettings().configured:
        raise Unavailable(
            "--qa needs an LLM endpoint: set STRATAMEM_LLM_BASE_URL and STRATAMEM_LLM_MODEL"
            " (any OpenAI-compatible chat API; STRATAMEM_LLM_API_KEY if it needs a key)"
        )
    if request.baseline is not None and request.baseline not in BASELINES:
        raise InvalidInput(f"unknown baseline {request.baseline!r}: use one of {BASELINES}")
    if not request.options.ks or min(request.options.ks) < 1:
        raise InvalidInput("--k needs positive integers, e.g. 1,5,10,20")
    if len(request.options.configs) > 1 and not request.cv:
        raise InvalidInput("several retrieval variants are only compared with --cv")
    if request.cv and request.select_k not in request.options.ks:
        raise InvalidInput(f"--select-k {request.select_k} must be one of --k {request.options.ks}")


async def evaluate_locomo(request: LocomoRequest) -> dict[str, Any]:
    check(request)
    samples = locomo.load(request.data)[: request.limit_samples]
    selection = select(samples)
    wants_llm = request.qa or request.options.mode == "llm"
    llm = LLMClient(LLMSettings()) if wants_llm else None
    try:
        run = await run_stratamem(
            samples, selection.probes, request.options, llm=llm, answer=request.qa
        )
    finally:
        if llm is not None:
            await llm.aclose()
    ks = request.options.ks
    first, varied = next(iter(run.by_config)), varying(run.by_config)
    report: dict[str, Any] = {
        "dataset": str(request.data),
        "mode": request.options.mode,
        "embedder": request.options.embedder,
        "k": list(ks),
        "samples": len(samples),
        "skipped": selection.skipped(),
        "base_config": first.label([n for n in first.changed() if n not in varied]),
        **run.summary(ks),
    }
    if request.cv:
        report["cv"] = cross_validate(run.by_config, ks, request.select_k)
    if request.baseline == "mem0":
        baseline = await asyncio.to_thread(run_mem0, samples, selection.probes, request.options)
        report["baseline"] = baseline.summary(ks)
        report["ratio"] = ratios(report, report["baseline"])
    return report


def write_outputs(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """The markdown report, the PNG chart and the JSON, in `out_dir`."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_chart(report, out_dir / CHART_NAME)
        page = markdown(report, CHART_NAME) + (cv_markdown(report) if "cv" in report else "")
        (out_dir / REPORT_NAME).write_text(page, encoding="utf-8")
        (out_dir / JSON_NAME).write_text(json.dumps(report, indent=2), encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write the report to {out_dir}: {exc}") from exc
    return [out_dir / REPORT_NAME, out_dir / CHART_NAME, out_dir / JSON_NAME]
