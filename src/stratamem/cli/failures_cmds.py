"""`stratamem failures list|show|retry`: the failure records of the LLM stages, with their raw
replies, and the retry of a quarantined turn or a failed stage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import click

from stratamem.cli.common import print_json, settings_from
from stratamem.core import AsyncMemory
from stratamem.errors import ConfigError
from stratamem.failures import BULK_RETRY_LIMIT, Failures
from stratamem.offload import InProcessRunner
from stratamem.runtime import offload_of
from stratamem.store.failures.records import (
    RETRYABLE,
    Failure,
    FailureKind,
    FailureQuery,
    FailureStatus,
)
from stratamem.store.opening import RecordStore
from stratamem.timestamps import utc_text

T = TypeVar("T")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_TENANT = click.option("--tenant", required=True, help="Tenant.")
_ERROR_CHARS = 100


@asynccontextmanager
async def _failures(ctx: click.Context, retrying: bool) -> AsyncIterator[Failures]:
    """The records of the data dir's store; to retry, with the configured embedder and LLM."""
    settings = settings_from(ctx)
    memory = (
        AsyncMemory.open(settings)
        if retrying
        else AsyncMemory.open(settings, embedder=None, llm=None, verify_embedding=False)
    )
    try:
        if not isinstance(memory.store, RecordStore):
            raise ConfigError("failure records need a SQLite or PostgreSQL store")
        yield Failures(memory.layer_service(), offload_of(memory, InProcessRunner(memory.clock)))
    finally:
        await memory.aclose()


def _run(
    ctx: click.Context, job: Callable[[Failures], Coroutine[Any, Any, T]], retrying: bool = False
) -> T:
    async def main() -> T:
        async with _failures(ctx, retrying) as failures:
            return await job(failures)

    return asyncio.run(main())


def _when(timestamp: float) -> str:
    return utc_text(timestamp, "%Y-%m-%d %H:%M:%S", "-")


def _line(failure: Failure) -> str:
    error = " ".join(failure.error.split())[:_ERROR_CHARS]
    where = failure.session or "-"
    return (
        f"{failure.id}  {_when(failure.failed_at)}  {failure.kind.value:<10} "
        f"{failure.status.value:<8} {failure.stage:<12} {where}  {error}"
    )


@click.group()
def failures() -> None:
    """Failure records of the LLM stages: quarantined turns, failed stages, rejected batches,
    dropped items, with their raw replies; retry a quarantined turn or a failed stage."""


@failures.command("list")
@_TENANT
@click.option("--session", default=None, help="Only this session.")
@click.option("--stage", default=None, help="Only this stage (L1, L2, L3, offload-l1 …).")
@click.option("--kind", type=click.Choice([k.value for k in FailureKind]), default=None)
@click.option("--status", type=click.Choice([s.value for s in FailureStatus]), default=None)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@_JSON
@click.pass_context
def failures_list(
    ctx: click.Context,
    tenant: str,
    session: str | None,
    stage: str | None,
    kind: str | None,
    status: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    """The tenant's failure records, newest first (`--json`: with the raw replies)."""
    query = FailureQuery(
        session=session,
        stage=stage,
        kind=None if kind is None else FailureKind(kind),
        status=None if status is None else FailureStatus(status),
        limit=limit,
        offset=offset,
    )
    found = _run(ctx, lambda f: f.list(tenant, query))
    if as_json:
        print_json([f.to_json() for f in found])
        return
    for failure in found:
        click.echo(_line(failure))


@failures.command("show")
@_TENANT
@click.argument("failure_id")
@_JSON
@click.pass_context
def failures_show(ctx: click.Context, tenant: str, failure_id: str, as_json: bool) -> None:
    """One failure record with its raw replies."""
    failure = _run(ctx, lambda f: f.get(tenant, failure_id))
    if as_json:
        print_json(failure.to_json())
        return
    data = failure.to_json()
    raws = data.pop("raws")
    for key, value in data.items():
        click.echo(f"{key}: {value}")
    for number, raw in enumerate(raws, start=1):
        click.echo(f"--- raw reply {number} of {len(raws)} ---")
        click.echo(raw)


@failures.command("retry")
@_TENANT
@click.argument("failure_id", required=False)
@click.option("--session", default=None, help="Every open record of this session.")
@click.option("--stage", default=None, help="Every open record of this stage.")
@click.option("--kind", type=click.Choice(sorted(k.value for k in RETRYABLE)), default=None,
              help="Every open record of this kind.")  # fmt: skip
@click.option("--limit", type=click.IntRange(1, BULK_RETRY_LIMIT), default=BULK_RETRY_LIMIT,
              show_default=True, help="Most records one bulk retry re-runs.")  # fmt: skip
@_JSON
@click.pass_context
def failures_retry(
    ctx: click.Context,
    tenant: str,
    failure_id: str | None,
    session: str | None,
    stage: str | None,
    kind: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Re-run a quarantined turn or a failed stage now, with the configured LLM endpoint; with
    no ID, every open record (of the session, stage or kind given), the oldest first."""
    if failure_id is None:
        wanted = None if kind is None else FailureKind(kind)
        many = _run(ctx, lambda f: f.retry_many(tenant, session, stage, wanted, limit),
                    retrying=True)  # fmt: skip
        if as_json:
            print_json(many.to_json())
            return
        click.echo(f"resolved {len(many.resolved)}, still open {len(many.still_open)},"
                   f" skipped {len(many.skipped)}, failed {len(many.failed)}")  # fmt: skip
        for failed_id, error in many.failed.items():
            click.echo(f"{failed_id}: {' '.join(error.split())[:_ERROR_CHARS]}")
        return
    if session or stage or kind:
        raise click.UsageError("give a failure ID, or filters (--session, --stage, --kind)")
    outcome = _run(ctx, lambda f: f.retry(tenant, failure_id), retrying=True)
    if as_json:
        print_json(outcome.to_json())
        return
    click.echo(f"{outcome.failure.id}: {outcome.failure.status.value}"
               f" after {outcome.failure.attempts} attempt(s)")  # fmt: skip
    click.echo(f"result: {outcome.result}")
