"""LLM calls, tokens and outcomes per stage, from this process's usage meter, as Prometheus
counters and as JSON (`GET /v1/admin/llm`). Labels are stage names and outcomes only: a fixed
set from the code, never a tenant or a model's words."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stratamem.api.metrics import label_set
from stratamem.llm.usage import OUTCOMES, UsageMeter

COUNTERS = (
    ("llm_calls_total", "calls", "Requests sent to the LLM endpoint per stage, retries included."),
    ("llm_prompt_tokens_total", "prompt_tokens", "Prompt tokens per stage, as counted by it."),
    ("llm_completion_tokens_total", "completion_tokens", "Completion tokens per stage."),
)


def usage_json(meter: UsageMeter | None) -> dict[str, dict[str, Any]]:
    """`{stage: {"calls", "prompt_tokens", "completion_tokens", "outcomes": {outcome: n}}}`."""
    if meter is None:
        return {}
    counts, outcomes = meter.snapshot(), meter.outcomes()
    empty = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    return {
        stage: {**counts.get(stage, empty),
                "outcomes": outcomes.get(stage, dict.fromkeys(OUTCOMES, 0))}
        for stage in sorted(set(counts) | set(outcomes))
    }  # fmt: skip


def usage_lines(meter: UsageMeter | None) -> Iterable[str]:
    """The counters in the text exposition format (HELP and TYPE even before any call)."""
    usage = usage_json(meter)
    for name, field, text in COUNTERS:
        yield f"# HELP stratamem_{name} {text}"
        yield f"# TYPE stratamem_{name} counter"
        for stage, counts in usage.items():
            yield f"stratamem_{name}{label_set(stage=stage)} {counts[field]}"
    name = "stratamem_llm_outcomes_total"
    yield f"# HELP {name} How each stage call ended: {', '.join(OUTCOMES)}."
    yield f"# TYPE {name} counter"
    for stage, counts in usage.items():
        for outcome, n in counts["outcomes"].items():
            yield f"{name}{label_set(stage=stage, outcome=outcome)} {n}"
