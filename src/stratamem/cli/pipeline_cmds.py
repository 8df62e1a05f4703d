"""`stratamem worker`, `stratamem pipeline …` and `stratamem bench pipeline`: thin shells over
`stratamem.pipeline`. Each command opens the backend, calls one thing, maps errors once."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from stratamem.errors import StratamemError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.runner import load_registry, open_backend, serve
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import worker_statuses

T = TypeVar("T")
DEFAULT_DATA_DIR = "./stratamem-data"


def _data_dir(ctx: click.Context) -> Path:
    """The root group's `--data-dir` (ctx.obj["data_dir"]); None means the default."""
    value = (ctx.find_root().obj or {}).get("data_dir")
    if value is None:
        value = os.environ.get("STRATAMEM_DATA_DIR", DEFAULT_DATA_DIR)
    return Path(value)


def _settings(**overrides: Any) -> PipelineSettings:
    try:
        return PipelineSettings(**{k: v for k, v in overrides.items() if v is not None})
    except StratamemError as exc:
        raise click.ClickException(str(exc)) from exc


def _with_backend(
    ctx: click.Context, settings: PipelineSettings, fn: Callable[[PipelineBackend], Awaitable[T]]
) -> T:
    async def go() -> T:
        backend = open_backend(settings, _data_dir(ctx))
        try:
            return await fn(backend)
        finally:
            await backend.close()

    try:
        return asyncio.run(go())
    except StratamemError as exc:
        raise click.ClickException(str(exc)) from exc


backend_option = click.option(
    "--backend", type=click.Choice(["sqlite", "redis"]), default=None, help="Pipeline backend."
)


@click.command()
@backend_option
@click.option("--concurrency", type=int, default=None, help="Concurrent consumers.")
@click.option(
    "--executors",
    envvar="STRATAMEM_PIPELINE_EXECUTORS",
    default="stratamem.api.background:worker_registry",
    show_default=True,
    help="module:factory returning the ExecutorRegistry; the default runs every task type "
    "`serve` runs (memory layers, context offload); no-op: "
    "stratamem.pipeline.executors:noop_registry.",
)
@click.option("--name", default=None, help="Worker name (default: random).")
@click.pass_context
def worker(
    ctx: click.Context,
    backend: str | None,
    concurrency: int | None,
    executors: str,
    name: str | None,
) -> None:
    """Run a pipeline worker until SIGTERM / SIGINT (then stop gracefully)."""
    settings = _settings(backend=backend, concurrency=concurrency)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        registry = load_registry(executors)
        done = asyncio.run(serve(settings, _data_dir(ctx), registry, name))
    except StratamemError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(done.metrics.snapshot()["counters"]))


@click.group()
def pipeline() -> None:
    """Inspect and operate the task pipeline."""


@pipeline.command()
@backend_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, backend: str | None, as_json: bool) -> None:
    """Queue depth, dead letters and the last status each worker published."""

    settings = _settings(backend=backend)

    async def read(b: PipelineBackend) -> dict[str, Any]:
        depth = (await b.depth()).as_dict()
        workers = await worker_statuses(b, time.time(), settings)
        return {"backend": b.__class__.__name__, "depth": depth, "workers": workers}

    report = _with_backend(ctx, settings, read)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
        return
    click.echo(" ".join(f"{k}={v}" for k, v in report["depth"].items()))
    for w in report["workers"]:
        click.echo(
            f"{w['name']} ({w['state']}, {w['age_s']:.0f} s ago): {w['counters']}"
            f" running={len(w['running'])}"
        )


@pipeline.group("dead-letters")
def dead_letters() -> None:
    """List, requeue or purge dead-letter records."""


@dead_letters.command("list")
@backend_option
@click.option("--limit", type=int, default=100)
@click.pass_context
def dead_list(ctx: click.Context, backend: str | None, limit: int) -> None:
    """Print dead letters as JSON lines (id, task, error, failed_at)."""

    async def read(b: PipelineBackend) -> list[dict[str, Any]]:
        return [
            {"id": d.id, "task": json.loads(d.task.to_json()), "error": d.error,
             "failed_at": d.failed_at}
            for d in await b.list_dead(limit=limit)
        ]  # fmt: skip

    for record in _with_backend(ctx, _settings(backend=backend), read):
        click.echo(json.dumps(record, sort_keys=True))


@dead_letters.command("requeue")
@backend_option
@click.argument("dead_ids", nargs=-1, required=True)
@click.pass_context
def dead_requeue(ctx: click.Context, backend: str | None, dead_ids: tuple[str, ...]) -> None:
    """Put dead letters back on the queue (attempt count reset)."""

    async def requeue(b: PipelineBackend) -> list[str]:
        return [(await b.requeue_dead(d, now=time.time())).id for d in dead_ids]

    for task_id in _with_backend(ctx, _settings(backend=backend), requeue):
        click.echo(f"requeued task {task_id}")


@dead_letters.command("purge")
@backend_option
@click.argument("dead_ids", nargs=-1)
@click.option("--all", "purge_all", is_flag=True, help="Purge every dead letter.")
@click.pass_context
def dead_purge(
    ctx: click.Context, backend: str | None, dead_ids: tuple[str, ...], purge_all: bool
) -> None:
    """Delete the named dead letters, or all with --all."""
    if not dead_ids and not purge_all:
        raise click.UsageError("name dead-letter ids or pass --all")

    async def purge(b: PipelineBackend) -> int:
        return await b.purge_dead(None if purge_all else list(dead_ids))

    click.echo(f"purged {_with_backend(ctx, _settings(backend=backend), purge)}")


@click.group()
def bench() -> None:
    """Benchmarks that print JSON figures against a baseline measured in the same run."""


@bench.command("pipeline")
@click.option("--backend", type=click.Choice(["sqlite", "redis"]), default="sqlite")
@click.option("--tasks", type=click.IntRange(min=10), default=2000, help="Tasks per phase.")
@click.option("--workers", type=click.IntRange(min=1), default=8, help="Concurrent consumers.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, help="Alternating runs (median).")
@click.option("--redis-url", envvar="STRATAMEM_PIPELINE_REDIS_URL", default=None)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench_pipeline(
    *, backend: str, tasks: int, workers: int, repeat: int, redis_url: str | None, as_json: bool
) -> None:
    """No-op tasks through the real worker path vs saq on the same Redis, in one run."""
    from stratamem.pipeline.bench import run_bench  # noqa: PLC0415 - needs the bench extra

    url = redis_url or PipelineSettings().redis_url
    try:
        report = asyncio.run(run_bench(backend, tasks, workers, url, repeat=repeat))
    except (StratamemError, ImportError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(report))
        return
    for key, value in report.items():
        click.echo(f"{key}: {value}")
