"""`stratamem eval …`: the evaluation harness shipped with the product."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import click

from stratamem.cli.common import print_json, settings_from
from stratamem.config import Settings
from stratamem.core import retrieval_config
from stratamem.errors import InvalidInput
from stratamem.eval.cv_report import cv_markdown
from stratamem.eval.locomo import BASELINES, LocomoRequest, evaluate_locomo, write_outputs
from stratamem.eval.report import text_table
from stratamem.eval.runner import MODES, EvalOptions
from stratamem.retrieval.config import RetrievalConfig, grid, parse_assignment


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


def variants(
    settings: Settings, set_knobs: tuple[str, ...], vary: tuple[str, ...]
) -> tuple[RetrievalConfig, ...]:
    """The settings' retrieval configuration with `--set` applied, then every combination of
    the `--vary` values (the base's own value first when it is listed)."""
    base = retrieval_config(settings)
    for assignment in set_knobs:
        name, values = parse_assignment(assignment)
        if len(values) != 1:
            raise InvalidInput(f"--set {assignment!r} takes one value (use --vary for several)")
        base = replace(base, **{name: values[0]})
    return tuple(grid(base, [parse_assignment(a) for a in vary]))


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
@click.option("--set", "set_knobs", multiple=True, metavar="NAME=VALUE",
              help="A retrieval knob for this run (repeatable); see docs/eval-locomo.md.")
@click.option("--cv", is_flag=True,
              help="Leave one conversation out: choose among the variants on the others,"
              " measure on it; report each fold, their mean and spread.")
@click.option("--vary", multiple=True, metavar="NAME=V1,V2,...",
              help="With --cv: the variants to choose among (repeatable: every combination).")
@click.option("--select-k", type=click.IntRange(min=1), default=10, show_default=True,
              help="With --cv: the recall@k variants are chosen by.")
@click.option("--embed-cache", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A SQLite file keeping every vector between runs (any embedder).")
@click.pass_context
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
    set_knobs: tuple[str, ...],
    cv: bool,
    vary: tuple[str, ...],
    select_k: int,
    embed_cache: Path | None,
) -> None:
    """Retrieval of LoCoMo evidence turns: recall@k and MRR per category, latency, ingest time.

    Each sample is captured into a fresh temporary store as its own tenant; every question of
    categories 1-4 whose evidence resolves is searched once (with --cv, once per variant).
    """
    settings = settings_from(ctx)
    if vary and not cv:
        raise InvalidInput("--vary needs --cv")
    options = EvalOptions(
        mode=mode, ks=parse_ks(k_list), embedder=settings.embedder, settings=settings,
        configs=variants(settings, set_knobs, vary), embed_cache=embed_cache,
    )
    request = LocomoRequest(data, options, limit_samples, baseline, qa, cv, select_k)
    report = asyncio.run(evaluate_locomo(request))
    if out is not None:
        for path in write_outputs(report, out):
            click.echo(f"wrote {path}", err=True)
    if as_json:
        print_json(report)
    else:
        click.echo(text_table(report), nl=False)
        if cv:
            click.echo("\n" + cv_markdown(report), nl=False)
