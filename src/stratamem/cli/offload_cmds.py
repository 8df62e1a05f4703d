"""`stratamem offload …`: ingest tool pairs, compact a context, read back a ref, show diagrams.

`ingest` runs the stages in-process (`InProcessRunner`, timers flushed), or hands them to the
pipeline (`--stages pipeline`: tasks and timers for `stratamem worker --executors
stratamem.runtime:offload_registry`). With an LLM configured (`STRATAMEM_LLM_*`)
summaries, judgments and diagrams come from it, else the offline mode runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from stratamem.cli.common import print_json, settings_from
from stratamem.clock import SystemClock
from stratamem.errors import InvalidInput
from stratamem.llm import LLMClient, LLMSettings
from stratamem.offload import InProcessRunner, Offload, RunReport, Scheduler, ToolPair
from stratamem.offload.executors import PipelineScheduler
from stratamem.pipeline.runner import open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.store.opening import open_stores

T = TypeVar("T")
Job = Callable[[Offload, InProcessRunner], Coroutine[Any, Any, T]]


@asynccontextmanager
async def _offload(
    ctx: click.Context, on_pipeline: bool = False
) -> AsyncIterator[tuple[Offload, InProcessRunner]]:
    """The offload over the data dir's store; its stages run in-process, or (`on_pipeline`)
    are handed to the pipeline's workers."""
    clock = SystemClock()
    settings = settings_from(ctx)
    stores = open_stores(settings)
    llm_settings = LLMSettings()
    llm = LLMClient(llm_settings, clock=clock) if llm_settings.configured else None
    runner = InProcessRunner(clock)
    backend = open_backend(PipelineSettings(), settings.data_dir) if on_pipeline else None
    scheduler: Scheduler = runner if backend is None else PipelineScheduler(backend, clock)
    try:
        yield Offload(stores.offload, scheduler, llm=llm, clock=clock), runner
    finally:
        if backend is not None:
            await backend.close()
        if llm is not None:
            await llm.aclose()
        stores.close()


def _run(ctx: click.Context, job: Job[T], on_pipeline: bool = False) -> T:
    async def main() -> T:
        async with _offload(ctx, on_pipeline) as (offload, runner):
            return await job(offload, runner)

    return asyncio.run(main())


@click.group()
def offload() -> None:
    """Context offload: tool results out of the context window, exact read-back by ref."""


@offload.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", required=True)
@click.option("--session", required=True)
@click.option(
    "--stages",
    type=click.Choice(["inline", "pipeline", "none"]),
    default="inline",
    show_default=True,
    help="Run the offload stages now, hand them to the pipeline's workers, or neither.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def ingest(
    ctx: click.Context, path: Path, tenant: str, session: str, stages: str, as_json: bool
) -> None:
    """Ingest a JSONL file of tool pairs (and `{"user": "…"}` lines, task boundaries)."""
    lines = _read_jsonl(path)

    async def job(off: Offload, runner: InProcessRunner) -> dict[str, Any]:
        stored, marks = await _ingest_lines(off, tenant, session, lines)
        inline = stages == "inline"
        report = await runner.run(off, flush=True) if inline else RunReport()
        entries = await off.entries(tenant, session)
        return {
            "stored": stored,
            "boundaries": marks,
            "entries": len(entries),
            "failed": [f"{task.stage}: {error}" for task, error in report.failed],
        }

    result = _run(ctx, job, on_pipeline=stages == "pipeline")
    if as_json:
        print_json(result)
    else:
        click.echo(
            f"stored {result['stored']} tool pairs and {result['boundaries']} boundaries;"
            f" {result['entries']} entries in the session"
        )
        for failure in result["failed"]:
            click.echo(f"failed (will be retried on the next run): {failure}", err=True)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{number}: not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise InvalidInput(f"{path}:{number}: expected a JSON object")
        lines.append(value)
    return lines


async def _ingest_lines(
    off: Offload, tenant: str, session: str, lines: list[dict[str, Any]]
) -> tuple[int, int]:
    now = off.deps.clock.now()
    pairs = [ToolPair.from_json(line, now) for line in lines if "user" not in line]
    stored = len((await off.ingest(tenant, session, pairs)).stored) if pairs else 0
    marks = 0
    for line in lines:
        if "user" in line:
            ts = line.get("timestamp")
            await off.user_message(
                tenant, session, str(line["user"]), message_id=line.get("id"),
                timestamp=None if ts is None else float(ts),
            )  # fmt: skip
            marks += 1
    return stored, marks


@offload.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", required=True)
@click.option("--session", required=True)
@click.option("--budget", "budget_tokens", type=int, required=True, help="Token budget.")
@click.option("--stats", "stats_only", is_flag=True, help="Print the figures only.")
@click.pass_context
def compact(
    ctx: click.Context, path: Path, tenant: str, session: str, budget_tokens: int,
    stats_only: bool,
) -> None:  # fmt: skip
    """Compact a JSON list of chat messages for a token budget; prints JSON."""
    try:
        messages = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: not JSON: {exc}") from exc
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidInput(f"{path}: expected a JSON list of message objects")

    async def job(off: Offload, _runner: InProcessRunner) -> dict[str, Any]:
        result = await off.compact(tenant, session, messages, budget_tokens)
        return result.to_json()

    result = _run(ctx, job)
    if stats_only:
        result.pop("messages")
    print_json(result)


@offload.command()
@click.argument("ref_id")
@click.option("--tenant", required=True)
@click.option("--query", default=None, help="Return the slice around these words.")
@click.option("--max-tokens", type=int, default=None, help="Token cap of the text returned.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def read(
    ctx: click.Context, ref_id: str, tenant: str, query: str | None, max_tokens: int | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Read back the full result behind a ref (or the slice around --query)."""

    async def job(off: Offload, _runner: InProcessRunner) -> dict[str, Any]:
        back = await off.read_back(tenant, ref_id, query=query, max_tokens=max_tokens)
        return back.to_json()

    result = _run(ctx, job)
    if as_json:
        print_json(result)
    else:
        click.echo(result["text"])


@offload.command()
@click.option("--tenant", required=True)
@click.option("--session", required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the tasks as JSON.")
@click.pass_context
def diagrams(ctx: click.Context, tenant: str, session: str, as_json: bool) -> None:
    """Show the session's tasks and their Mermaid diagrams."""

    async def job(off: Offload, _runner: InProcessRunner) -> dict[str, Any]:
        return (await off.diagrams(tenant, session)).to_json()

    result = _run(ctx, job)
    if as_json:
        print_json(result)
        return
    if result["note"]:
        click.echo(f"note: {result['note']}", err=True)
    for task in result["diagrams"]:
        click.echo(f"## {task['label']} ({task['status']}, {task['task_id']})")
        click.echo(task["mermaid"] or "(no diagram yet)")


@offload.command()
@click.option("--tenant", required=True)
@click.option("--session", required=True)
@click.pass_context
def entries(ctx: click.Context, tenant: str, session: str) -> None:
    """List the session's entries (summary, score, ref) as JSON."""

    async def job(off: Offload, _runner: InProcessRunner) -> list[dict[str, Any]]:
        return [e.to_json() for e in await off.entries(tenant, session)]

    print_json(_run(ctx, job))


@offload.command()
@click.option("--tenant", required=True)
@click.option("--session", required=True)
@click.option(
    "--stages",
    type=click.Choice(["inline", "pipeline"]),
    default="inline",
    show_default=True,
    help="Run the resubmitted stages now, or hand them to the pipeline's workers.",
)
@click.pass_context
def resubmit(ctx: click.Context, tenant: str, session: str, stages: str) -> None:
    """Submit a session's waiting work again (after dead letters); prints JSON."""

    async def job(off: Offload, runner: InProcessRunner) -> dict[str, Any]:
        result = (await off.resubmit(tenant, session)).to_json()
        if stages == "inline":
            report = await runner.run(off, flush=True)
            result["failed"] = [f"{task.stage}: {error}" for task, error in report.failed]
        return result

    print_json(_run(ctx, job, on_pipeline=stages == "pipeline"))
