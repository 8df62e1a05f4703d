"""CLI commands over capture and retrieval: capture, search, recall, import, reindex, erase,
stats."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from stratamem.capture import ROLE_ALIASES, parse_timestamp
from stratamem.cli.common import (
    open_memory,
    print_json,
    progress,
    why_nothing,
)
from stratamem.cli.importing import read_jsonl
from stratamem.datasets import locomo
from stratamem.domain import Hit, Layer, MemoryType, Role, Scope
from stratamem.pipeline.runner import SQLITE_FILE, open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.timers import clear_session_timers
from stratamem.sync import Memory
from stratamem.timestamps import utc_text

_LAYERS = click.Choice(["L0", "L1", "all"], case_sensitive=False)


@click.command()
@click.option("--tenant", required=True, help="Tenant the conversation belongs to.")
@click.option("--session", required=True, help="Session (conversation) id.")
@click.option(
    "--role", default="user", show_default=True,
    type=click.Choice([*(r.value for r in Role), *ROLE_ALIASES], case_sensitive=False),
    help="human is taken as user, ai and bot as assistant (as capture does everywhere).",
)
@click.option("--text", required=True, help="The message, verbatim.")
@click.option("--speaker", default=None, help="Who said it (a name).")
@click.option(
    "--timestamp", default=None, help="Epoch seconds or RFC 3339 (2024-05-08T14:30:00Z); now."
)
@click.option("--id", "message_id", default=None, help="Caller's id, for idempotent re-capture.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def capture(
    ctx: click.Context,
    tenant: str,
    session: str,
    role: str,
    text: str,
    speaker: str | None,
    timestamp: str | None,
    message_id: str | None,
    as_json: bool,
) -> None:
    """Capture one message into the store (searchable by BM25 at once)."""
    message: dict[str, Any] = {"role": role, "text": text, "speaker": speaker, "id": message_id}
    if timestamp is not None:
        message["timestamp"] = _timestamp_arg(timestamp)
    with open_memory(ctx) as memory:
        result = memory.capture(tenant, session, [message])
    if as_json:
        print_json(result.to_json())
    else:
        state = "stored" if result.stored else "already captured"
        click.echo(f"{state}: {', '.join(result.ids) or '(nothing: only injected blocks)'}")


def _timestamp_arg(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return parse_timestamp(value, 0)


def _search_options(command: Any) -> Any:
    options = [
        click.option("--tenant", required=True),
        click.option("--k", default=10, show_default=True, help="How many hits."),
        click.option("--layer", type=_LAYERS, default="all", show_default=True),
        click.option(
            "--type", "types", multiple=True, type=click.Choice([t.value for t in MemoryType])
        ),
        click.option("--session", "sessions", multiple=True, help="Only these sessions."),
        click.option("--since", default=None, help="Not before (epoch seconds or RFC 3339)."),
        click.option("--until", default=None, help="Not after (epoch seconds or RFC 3339)."),
        click.option("--json", "as_json", is_flag=True, help="Print hits as a JSON list."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command()
@click.argument("query")
@_search_options
@click.pass_context
def search(
    ctx: click.Context,
    query: str,
    tenant: str,
    k: int,
    layer: str,
    types: tuple[str, ...],
    sessions: tuple[str, ...],
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """Hybrid search (BM25 + vectors, fused by reciprocal rank) within one tenant."""
    layers = [Layer.L1, Layer.L0] if layer.lower() == "all" else [Layer(layer.upper())]
    with open_memory(ctx, existing=True) as memory:
        _catch_up(memory)
        hits = memory.search(
            tenant,
            query,
            k=k,
            layers=layers,
            types=list(types) or None,
            sessions=list(sessions) or None,
            since=None if since is None else _timestamp_arg(since),
            until=None if until is None else _timestamp_arg(until),
        )
        if not hits:
            click.echo(why_nothing(memory.stats(tenant), tenant, "hits"), err=True)
    if as_json:
        print_json([h.to_json() for h in hits])
        return
    for hit in hits:
        click.echo(_hit_line(hit))


def _hit_line(hit: Hit) -> str:
    when = utc_text(hit.timestamp, "%Y-%m-%d")
    who = f"{hit.speaker}: " if hit.speaker else ""
    return f"{hit.score:.4f}  {hit.layer.value}  {hit.session or '-'}  {when}  {who}{hit.text}"


def _catch_up(memory: Memory) -> None:
    pending = sum(memory.stats()[layer.value]["pending_embeddings"] for layer in Layer)
    if pending == 0 or memory.core.embedder is None:
        return
    with progress(pending, "embedding") as advance:
        memory.embed_pending(progress=advance)


@click.command()
@click.argument("query")
@click.option("--tenant", required=True)
@click.option("--session", default=None, help="The session the next model call belongs to.")
@click.option("--k", default=None, type=int, help="How many memories (default: setting).")
@click.option("--budget", default=None, type=int, help="Character budget of the block.")
@click.option("--json", "as_json", is_flag=True, help="Print context, stable block and hits.")
@click.pass_context
def recall(
    ctx: click.Context,
    query: str,
    tenant: str,
    session: str | None,
    k: int | None,
    budget: int | None,
    as_json: bool,
) -> None:
    """What to put before the next model call: relevant memories and the stable block."""
    with open_memory(ctx, existing=True) as memory:
        _catch_up(memory)
        result = memory.recall(tenant, query, session=session, k=k, budget_chars=budget)
        if not result.hits and not result.stable:
            click.echo(why_nothing(memory.stats(tenant), tenant, "memories to recall"), err=True)
    if as_json:
        print_json(result.to_json())
        return
    for block in (result.stable, result.context):
        if block:
            click.echo(block)


@click.command(name="import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["jsonl", "locomo"]), default="jsonl")
@click.option("--tenant", default=None, help="Tenant (jsonl: required; locomo: a prefix).")
@click.option("--session", default=None, help="jsonl: session for lines that name none.")
@click.option("--no-embed", is_flag=True, help="Leave embeddings for later.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def import_(
    ctx: click.Context,
    path: Path,
    fmt: str,
    tenant: str | None,
    session: str | None,
    no_embed: bool,
    as_json: bool,
) -> None:
    """Import a JSONL file of messages, or LoCoMo conversations (one tenant per sample)."""
    plan = _import_plan(path, fmt, tenant, session)
    total = sum(len(m) for _, batches in plan for _, m in batches)
    summary: dict[str, Any] = {"tenants": {}, "messages": total}
    with open_memory(ctx) as memory:
        with progress(total, "capturing") as advance:
            for plan_tenant, batches in plan:
                result = memory.import_batches(plan_tenant, batches, progress=advance)
                summary["tenants"][plan_tenant] = {
                    "stored": len(result.stored),
                    "duplicates": len(result.duplicates),
                }
        if not no_embed:
            _catch_up(memory)
    if as_json:
        print_json(summary)
    else:
        for name, counts in summary["tenants"].items():
            click.echo(f"{name}: {counts['stored']} stored, {counts['duplicates']} already there")


def _import_plan(
    path: Path, fmt: str, tenant: str | None, session: str | None
) -> list[tuple[str, list[tuple[str, list[Any]]]]]:
    if fmt == "locomo":
        prefix = f"{tenant}-" if tenant else ""
        return [
            (f"{prefix}{sample.sample_id}", list(sample.sessions.items()))
            for sample in locomo.load(path)
        ]
    if tenant is None:
        raise click.UsageError("--tenant is required for jsonl imports")
    batches = read_jsonl(path, session)
    return [(tenant, [(b.session, list(b.messages)) for b in batches])]


@click.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def reindex(ctx: click.Context, yes: bool) -> None:
    """Drop every vector and embed everything again with the configured embedder."""
    if not yes:
        click.confirm("Re-embed every record with the configured embedder?", abort=True)
    with open_memory(ctx, verify_embedding=False) as memory:
        total = sum(memory.stats()[layer.value]["records"] for layer in Layer)
        with progress(total, "re-embedding") as advance:
            done = memory.reindex(progress=advance)
    click.echo(f"re-embedded {done} records")


@click.command()
@click.option("--tenant", required=True, help="The tenant whose data is erased.")
@click.option("--session", default=None, help="Only this session (else the whole tenant).")
@click.option("--turn", "turn_id", default=None, help="Only this captured turn.")
@click.option("--memory", "memory_id", default=None, help="Only this memory (and its history).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def erase(
    ctx: click.Context,
    tenant: str,
    session: str | None,
    turn_id: str | None,
    memory_id: str | None,
    yes: bool,
) -> None:
    """Forget a session, a turn or a memory, and what was built on it (docs/forgetting.md), or
    a whole tenant's data. Tenant registrations and keys are `tenants` / `keys` business."""
    named = [(k, v) for k, v in (("session", session), ("turn", turn_id),
                                 ("memory", memory_id)) if v is not None]  # fmt: skip
    if len(named) > 1:
        raise click.UsageError("name at most one of --session, --turn and --memory")
    what = f"{named[0][0]} {named[0][1]!r} of tenant {tenant!r}" if named else (
        f"all of tenant {tenant!r}")  # fmt: skip
    if not yes:
        click.confirm(f"Erase {what}? This cannot be undone.", abort=True)
    with open_memory(ctx, existing=True) as memory:
        sessions = [session] if session is not None else []
        if session is not None:
            erased = memory.erase_session(tenant, session)
        elif turn_id is not None:
            erased = memory.erase_turn(tenant, turn_id)
        elif memory_id is not None:
            erased = memory.erase_memory(tenant, memory_id)
        else:
            sessions = memory.core.store.sessions_with_data(Scope(tenant))
            erased = memory.erase_tenant(tenant)
        settings = memory.core.settings
    if sessions:
        asyncio.run(_clear_timers(settings.data_dir, tenant, sessions))
    print_json({"tenant": tenant, "session": session, "erased": erased})


async def _clear_timers(data_dir: Path, tenant: str, sessions: list[str]) -> None:
    """Disarm the erased sessions' pending timers in the configured pipeline backend (a SQLite
    pipeline that was never created holds none: it is not created here)."""
    pipeline = PipelineSettings()
    if pipeline.backend == "sqlite" and not (data_dir / SQLITE_FILE).exists():
        return
    backend = open_backend(pipeline, data_dir)
    try:
        for name in sessions:
            await clear_session_timers(backend, tenant, name)
    finally:
        await backend.close()


@click.command()
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def stats(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Counts of turns, memories, sessions and pending embeddings."""
    with open_memory(ctx, verify_embedding=False, existing=True) as memory:
        result = memory.stats(tenant)
    if as_json:
        print_json(result)
        return
    click.echo(stats_table(result))


def stats_table(stats: dict[str, Any]) -> str:
    """The counts as a table: one row per layer, then the store's other figures."""
    rows = [("layer", "records", "pending embeddings")]
    for layer, name in (("L0", "L0 turns"), ("L1", "L1 memories")):
        counts = stats.get(layer) or {}
        rows.append((name, str(counts.get("records", 0)), str(counts.get("pending_embeddings", 0))))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}" for r in rows]
    model = stats.get("embedding_model")
    embedding = f"{model} ({stats.get('embedding_dim')} dims)" if model else "none yet"
    lines += ["", f"sessions   {stats.get('sessions', 0)}"]
    if "tenants" in stats:
        lines.append(f"tenants    {stats['tenants']}")
    lines.append(f"embedding  {embedding}")
    if stats.get("embedding_last_error"):
        lines.append(f"last embedding error: {stats['embedding_last_error']}")
    if "turn_outcomes" in stats:  # one tenant's: the turn ledger
        lines += ["", "L1 outcome of each turn (the turn ledger):"]
        by_session = {"all sessions": stats["turn_outcomes"],
                      **stats.get("turn_outcomes_by_session", {})}  # fmt: skip
        for session, counts in by_session.items():
            shown = " · ".join(f"{name} {n}" for name, n in counts.items() if n) or "no turns"
            lines.append(f"  {session}: {shown}")
    return "\n".join(lines)
