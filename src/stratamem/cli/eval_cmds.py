"""`stratamem eval …`: the evaluation harness shipped with the product."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from stratamem.cli.common import handle_errors, print_json, settings_from
from stratamem.errors import InvalidInput
from stratamem.eval.locomo import BASELINES, LocomoRequest, evaluate_locomo, write_outputs
from stratamem.eval.report import text_table
from stratamem.eval.runner import MODES, EvalOptions


@click.group(name="eval")
def eval_group() -> None:
    """Measure stratamem on public benchmarks, on this machine."""


def parse_ks(value: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(part) for part in value.split(",") if part.strip()}))
    except ValueError as exc:
        raise InvalidInput(f"--k must be comma-separated integers, got {value!r}") from exc
    if not ks or ks[0] < 1:
        raise InvalidInput(f"--k must be positive integers, got {value!r}")
    return ks


@eval_group.command()
@click.option(
    "--data",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A LoCoMo JSON file (a list of samples).",
)
@click.option("--mode", type=click.Choice(MODES), default="raw", show_default=True,
              help="raw: search captured turns; offline / llm: run the memory layers first.")
@click.option("--k", "k_list", default="1,5,10,20", show_default=True, help="Cut-offs for recall.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write report.md, recall.png and report.json here.")
@click.option("--limit-samples", type=click.IntRange(min=1), default=None,
              help="Only the first N samples.")
@click.option("--baseline", type=click.Choice(BASELINES), default=None,
              help="Also run this system on the same data and print both.")
@click.option("--qa", is_flag=True, help="Answer and judge each question with the LLM.")
@click.pass_context
@handle_errors
def locomo(
    ctx: click.Context,
    data: Path,
    mode: str,
    k_list: str,
    as_json: bool,
    out: Path | None,
    limit_samples: int | None,
    baseline: str | None,
    qa: bool,
) -> None:
    """Retrieval of LoCoMo evidence turns: recall@k and MRR per category, latency, ingest time.

    Each sample is captured into a fresh temporary store as its own tenant; every question of
    categories 1-4 whose evidence resolves is searched once.
    """
    settings = settings_from(ctx)
    options = EvalOptions(
        mode=mode, ks=parse_ks(k_list), embedder=settings.embedder, settings=settings
    )
    request = LocomoRequest(data, options, limit_samples, baseline, qa)
    report = asyncio.run(evaluate_locomo(request))
    if out is not None:
        for path in write_outputs(report, out):
            click.echo(f"wrote {path}", err=True)
    if as_json:
        print_json(report)
    else:
        click.echo(text_table(report), nl=False)
