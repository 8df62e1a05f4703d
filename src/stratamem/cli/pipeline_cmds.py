"""`stratamem worker`, `stratamem pipeline …` and `stratamem bench pipeline`: thin shells over
`stratamem.pipeline`. Each command opens the backend and calls one thing; the root group maps
its errors to exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from stratamem import logs
from stratamem.cli.common import existing_store, sqlite_file
from stratamem.config import Settings
from stratamem.domain import Scope
from stratamem.errors import ConfigError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ReceiptReader
from stratamem.pipeline.reconcile import ExecutionReader, Report, reconcile
from stratamem.pipeline.runner import SQLITE_FILE, load_registry, open_backend, serve
from stratamem.pipeline.scheduler import SNAPSHOT_COUNTERS, read_snapshot
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import worker_statuses
from stratamem.store.evidence.executions import Execution
from stratamem.store.evidence.receipts import Receipt
from stratamem.store.opening import open_stores

T = TypeVar("T")
DEFAULT_DATA_DIR = "./stratamem-data"


def _data_dir(ctx: click.Context) -> Path:
    """The root group's `--data-dir` (ctx.obj["data_dir"]); None means the default."""
    value = (ctx.find_root().obj or {}).get("data_dir")
    if value is None:
        value = os.environ.get("STRATAMEM_DATA_DIR", DEFAULT_DATA_DIR)
    return Path(value)


def _settings(**overrides: Any) -> PipelineSettings:
    return PipelineSettings(**{k: v for k, v in overrides.items() if v is not None})


def _with_backend(
    ctx: click.Context, settings: PipelineSettings, fn: Callable[[PipelineBackend], Awaitable[T]]
) -> T:
    async def go() -> T:
        backend = open_backend(settings, _data_dir(ctx))
        try:
            return await fn(backend)
        finally:
            await backend.close()

    return asyncio.run(go())


def _no_pipeline_file(ctx: click.Context, settings: PipelineSettings) -> bool:
    """Whether the SQLite backend has no file yet (nothing was ever queued): a command that only
    reads must not create it by opening it."""
    return settings.backend == "sqlite" and not (_data_dir(ctx) / SQLITE_FILE).exists()


backend_option = click.option(
    "--backend", type=click.Choice(["sqlite", "redis"]), default=None, help="Pipeline backend."
)


@click.command()
@backend_option
@click.option("--concurrency", type=int, default=None, help="Concurrent consumers.")
@click.option(
    "--executors",
    envvar="STRATAMEM_PIPELINE_EXECUTORS",
    show_envvar=True,
    default="stratamem.runtime:worker_registry",
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
    logs.configure()
    registry = load_registry(executors)
    done = asyncio.run(serve(settings, _data_dir(ctx), registry, name))
    click.echo(json.dumps(done.metrics.snapshot()["counters"]))


@click.group()
def pipeline() -> None:
    """Inspect and operate the task pipeline."""


@pipeline.command()
@backend_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, backend: str | None, as_json: bool) -> None:
    """Queue depth, dead letters, the last status each worker published, the backlog
    scheduler's counters and backlog per kind, and what retention pruned."""

    settings = _settings(backend=backend)

    async def read(b: PipelineBackend) -> dict[str, Any]:
        depth = (await b.depth()).as_dict()
        workers = await worker_statuses(b, time.time(), settings)
        scheduler = await read_snapshot(b)
        return {"backend": b.__class__.__name__, "depth": depth, "workers": workers,
                "scheduler": scheduler}  # fmt: skip

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
    if report["scheduler"] is not None:
        snap = report["scheduler"]
        counters = " ".join(f"{k}={snap[k]}" for k in SNAPSHOT_COUNTERS)
        click.echo(f"scheduler {snap['owner']}: {counters} backlog={snap['backlog']}")
        retention = snap.get("retention")
        if retention is not None:
            click.echo("retention: " + " ".join(f"{k}={v}" for k, v in retention.items()))


@contextmanager
def _evidence(ctx: click.Context) -> Iterator[tuple[ReceiptReader | None, ExecutionReader | None]]:
    """Readers of the store's receipts and execution log; None when the data directory has no
    store."""
    settings = Settings(data_dir=_data_dir(ctx))
    path = sqlite_file(settings)
    if path is not None and not path.exists():
        yield None, None
        return
    stores = open_stores(settings)
    evidence = stores.evidence

    async def receipt(tenant: str, task_id: str) -> Receipt | None:
        return await asyncio.to_thread(evidence.receipt, Scope(tenant), task_id)

    async def executions(tenant: str, task_id: str) -> list[Execution]:
        return await asyncio.to_thread(evidence.executions, Scope(tenant), task_id)

    try:
        yield receipt, executions
    finally:
        stores.close()


@pipeline.command("reconcile")
@backend_option
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def reconcile_cmd(ctx: click.Context, backend: str | None, limit: int, as_json: bool) -> None:
    """For each delivery in flight or pending reclaim: who has authority over it, what the
    evidence says (completion receipt, execution stamp, execution log) and whether its
    completion may be submitted. Evidence only: changes nothing."""
    settings = _settings(backend=backend)
    with _evidence(ctx) as (receipts, executions):

        def judge(b: PipelineBackend) -> Awaitable[list[Report]]:
            return reconcile(b, receipts, settings, now=time.time(), limit=limit,
                             executions=executions)  # fmt: skip

        reports = [] if _no_pipeline_file(ctx, settings) else _with_backend(ctx, settings, judge)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in reports], sort_keys=True))
        return
    for r in reports:
        click.echo(
            f"{r.task.type} {r.task.id} ({r.task.tenant}/{r.task.session or '-'}):"
            f" {r.authority}, {r.finding}"
            + (", completion may be submitted" if r.may_submit_completion else "")
        )


@pipeline.command("executions")
@click.option("--tenant", required=True, help="The tenant whose executions to list.")
@click.option("--task", "task_id", default=None, help="Only the executions of this task id.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def executions_cmd(
    ctx: click.Context, tenant: str, task_id: str | None, limit: int, as_json: bool
) -> None:
    """The execution log of a tenant's tasks, in the order they started: attempt, delivery,
    fencing token, worker, start, commit, end, outcome, and when a later execution fenced it."""
    stores = open_stores(existing_store(Settings(data_dir=_data_dir(ctx))))
    try:
        runs = stores.evidence.executions(Scope(tenant), task_id, limit)
    finally:
        stores.close()
    if as_json:
        click.echo(json.dumps([r.to_json() for r in runs], sort_keys=True))
        return
    for r in runs:
        a = r.attempt
        fenced = "" if r.fenced_at is None else f", fenced at {r.fenced_at:.3f}"
        click.echo(
            f"{r.type} {a.task_id} attempt {a.attempt} delivery {a.delivery} token {a.token}"
            f" by {a.worker}: {a.started_at:.3f} -> {_at(r.ended_at)} {r.outcome or 'open'}"
            + fenced
        )


def _at(when: float | None) -> str:
    return "-" if when is None else f"{when:.3f}"


@pipeline.command("rotate-receipt-key")
@click.option(
    "--retire-old",
    is_flag=True,
    help="Retire the older keys: their receipts stop "
    "verifying (they then count as receipt conflicts, never as completion).",
)
@click.pass_context
def rotate_receipt_key(ctx: click.Context, retire_old: bool) -> None:
    """Add a new key that signs completion receipts from now on (older keys still verify until
    retired)."""
    settings = Settings(data_dir=_data_dir(ctx))
    stores = open_stores(settings)
    try:
        key_id = stores.evidence.rotate_receipt_key(time.time(), retire_old=retire_old)
    finally:
        stores.close()
    click.echo(
        f"receipts are signed with key {key_id}" + (" (older keys retired)" if retire_old else "")
    )


@pipeline.group("dead-letters")
def dead_letters() -> None:
    """List, requeue or purge dead-letter records."""


@dead_letters.command("list")
@backend_option
@click.option("--limit", type=click.IntRange(min=1), default=100)
@click.option("--tenant", default=None, help="Only this tenant's dead letters.")
@click.option("--after", default=None, help="Page after this dead-letter id (a cursor).")
@click.pass_context
def dead_list(
    ctx: click.Context, backend: str | None, limit: int, tenant: str | None, after: str | None
) -> None:
    """Print dead letters as JSON lines (id, task, error, failed_at), oldest first."""

    async def read(b: PipelineBackend) -> list[dict[str, Any]]:
        return [
            {"id": d.id, "task": json.loads(d.task.to_json()), "error": d.error,
             "failed_at": d.failed_at}
            for d in await b.list_dead(limit=limit, tenant=tenant, after=after)
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
    from stratamem.pipeline.bench import run_bench  # noqa: PLC0415 - imported when run

    url = redis_url or PipelineSettings().redis_url
    try:
        report = asyncio.run(run_bench(backend, tasks, workers, url, repeat=repeat))
    except ImportError as exc:  # saq and redis are the bench extra's
        raise ConfigError(f"the pipeline bench needs the bench extra: {exc}") from exc
    if as_json:
        click.echo(json.dumps(report))
        return
    for key, value in report.items():
        click.echo(f"{key}: {value}")
