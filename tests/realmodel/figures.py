"""The real-model tier's table: calls, tokens, seconds per call and outcomes per stage."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean

from stratamem.llm.usage import OUTCOMES, UsageMeter

from .conftest import Wire

LAYER_STAGES = ("L1", "L1-reconcile", "L2", "L3")


def print_figures(wire: Wire, meters: Sequence[UsageMeter], turns: int) -> None:
    usage: dict[str, dict[str, int]] = {}
    for meter in meters:
        for table in (meter.snapshot(), meter.outcomes()):
            for stage, counts in table.items():
                row = usage.setdefault(stage, {})
                for name, value in counts.items():
                    row[name] = row.get(name, 0) + value
    header = ["stage", "calls", "prompt tok", "compl tok", "s/call", "calls/turn", *OUTCOMES]
    lines = [header]
    for stage in sorted(usage):
        row = usage[stage]
        seconds = [s.seconds for s in wire.sent if s.stage == stage and s.seconds is not None]
        lines.append([
            stage, str(row.get("calls", 0)), str(row.get("prompt_tokens", 0)),
            str(row.get("completion_tokens", 0)),
            f"{mean(seconds):.1f}" if seconds else "-",
            f"{row.get('calls', 0) / turns:.2f}" if stage in LAYER_STAGES else "-",
            *(str(row.get(name, 0)) for name in OUTCOMES),
        ])  # fmt: skip
    layer_calls = sum(usage.get(stage, {}).get("calls", 0) for stage in LAYER_STAGES)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print("\nreal-model tier: SmolLM2-135M-Instruct Q4_1 on llama-cpp-python 0.3.36")
    for line in lines:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    all_seconds = [s.seconds for s in wire.sent if s.seconds is not None]
    print(
        f"requests {len(wire.sent)}, all with max_tokens: "
        f"{all('max_tokens' in s.body for s in wire.sent)}; "
        f"mean {mean(all_seconds) if all_seconds else 0:.1f} s per request; "
        f"memory-layer calls per captured turn {layer_calls / turns:.2f} ({turns} turns)"
    )
