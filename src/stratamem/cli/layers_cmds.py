"""CLI commands over the memory layers: flush, schedule, memories, profile, scenes."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from stratamem.cli.common import (
    existing_store,
    open_memory,
    print_json,
    settings_from,
    why_nothing,
)
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import MemoryRecord, MemoryType, Profile, Scene, Scope, check_ident
from stratamem.layers.ledger import totals
from stratamem.layers.service import MAX_REREAD_TURNS
from stratamem.pipeline.runner import open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.task import Task
from stratamem.runtime import registry_of
from stratamem.store.core.port import Filters
from stratamem.store.layers.port import LayerStore
from stratamem.store.opening import RecordStore, open_stores
from stratamem.timestamps import utc_text

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_TENANT = click.option("--tenant", required=True, help="Tenant.")


@contextmanager
def _open_layers(ctx: click.Context) -> Iterator[tuple[RecordStore, LayerStore]]:
    """The store and its layer records, without an embedder or LLM (read-only commands)."""
    settings = existing_store(settings_from(ctx))
    stores = open_stores(settings)
    try:
        yield stores.core, stores.layers
    finally:
        stores.close()


def _when(timestamp: float | None) -> str:
    return utc_text(timestamp, "%Y-%m-%d %H:%M", "-")


def memory_json(memory: MemoryRecord) -> dict[str, Any]:
    return {
        "id": memory.id, "type": memory.type.value, "content": memory.content,
        "priority": memory.priority, "source_turn_ids": list(memory.source_turn_ids),
        "session": memory.session, "activity_start": memory.activity_start,
        "valid_from": memory.valid_from, "valid_to": memory.valid_to,
        "superseded_by": memory.superseded_by, "mode": memory.mode.value,
    }  # fmt: skip


def scene_json(scene: Scene) -> dict[str, Any]:
    return {
        "id": scene.id, "title": scene.title, "summary": scene.summary, "body": scene.body,
        "heat": round(scene.heat, 3), "version": scene.version, "deleted": scene.deleted,
        "memory_ids": list(scene.memory_ids), "updated_at": scene.updated_at,
        "mode": scene.mode.value,
    }  # fmt: skip


def profile_json(profile: Profile) -> dict[str, Any]:
    return {"version": profile.version, "body": profile.body, "updated_at": profile.updated_at,
            "mode": profile.mode.value}  # fmt: skip


def _memory_line(memory: MemoryRecord) -> str:
    state = "current" if memory.valid_to is None else f"until {_when(memory.valid_to)}"
    return f"{memory.id}  {memory.type.value:<11} {state:<22} {memory.content}"


@click.command()
@_TENANT
@click.option("--session", required=True, help="Session to run the layers for.")
@_JSON
@click.pass_context
def flush(ctx: click.Context, tenant: str, session: str, as_json: bool) -> None:
    """Run the layers for a session now (L1 until caught up, L2, L3) and wait."""
    with open_memory(ctx) as memory:
        result = memory.flush(tenant, session)
    if as_json:
        print_json(result.to_json())
        return
    batches = [r for r in result.l1 if not r.skipped]
    stored = sum(r.counts.get("store", 0) + r.counts.get("update", 0)
                 + r.counts.get("merge", 0) for r in batches)  # fmt: skip
    click.echo(f"L1: {len(batches)} batch(es), {stored} memories written")
    for stage in (result.l2, result.l3):
        if stage is not None:
            click.echo(f"{stage.stage}: {'changed' if stage.changed else 'unchanged'}"
                       f" ({stage.mode.value})")  # fmt: skip


@click.command()
@click.option(
    "--once", is_flag=True,
    help="Run one pass (no state kept from earlier runs) and a retention pass if one is due,"
    " under the scheduler's leases, print the tasks submitted, and exit. Skips (and names) the"
    " kinds whose lease another process (a worker, serve) holds: that one runs their passes.",
)
@click.pass_context
def schedule(ctx: click.Context, once: bool) -> None:
    """Run the backlog scheduler over the layers' owed work (L1, L2, L3, flush), and retention
    of the pipeline's log and receipts, until SIGTERM / SIGINT (workers and serve run one
    already; this is for a deployment without them). Each kind has its own lease: this process
    schedules the kinds no other process holds."""
    tasks, skipped = asyncio.run(_schedule(settings_from(ctx), once))
    if skipped:
        click.echo(f"another process holds the scheduler's lease of {', '.join(skipped)}"
                   " and runs their passes: skipped", err=True)  # fmt: skip
    for task in tasks:
        click.echo(f"{task.type.name} {task.tenant} {task.session or '-'}")


async def _schedule(settings: Settings, once: bool) -> tuple[list[Task], list[str]]:
    """The tasks a `once` pass submitted, and the kinds it skipped (another process holds
    their lease)."""
    memory = AsyncMemory.open(settings, embedder=None, llm=None)
    pipeline = PipelineSettings()
    backend = open_backend(pipeline, settings.data_dir)
    try:
        registry = registry_of(memory, backend)
        owner = f"schedule-{os.getpid()}"
        loop = registry.scheduler_loop(backend, pipeline, memory.clock, owner)
        if loop is None:
            return [], []
        if once:
            report = await loop.once()
            skipped = [n for n in loop.leases() if n not in loop.last_held]
            return ([] if report is None else report.submitted), skipped
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, stop.set)
        await loop.run(stop)
        return [], []
    finally:
        await backend.close()
        await memory.aclose()


@click.group()
def memories() -> None:
    """List, show and trace the versions of L1 memories."""


@memories.command("list")
@_TENANT
@click.option("--type", "types", multiple=True, type=click.Choice([t.value for t in MemoryType]))
@click.option("--session", "sessions", multiple=True, help="Only these sessions.")
@click.option("--as-of", "as_of", type=float, default=None, help="Valid at this epoch time.")
@click.option("--limit", default=50, show_default=True)
@_JSON
@click.pass_context
def memories_list(
    ctx: click.Context,
    tenant: str,
    types: tuple[str, ...],
    sessions: tuple[str, ...],
    as_of: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """Current memories (or those valid at --as-of), newest first."""
    filters = Filters(
        types=tuple(MemoryType(t) for t in types) or None,
        sessions=sessions or None,
        as_of=as_of,
    )
    with _open_layers(ctx) as (store, _):
        found = store.list_memories(Scope(tenant), filters, limit)
        if not found:
            click.echo(why_nothing(store.stats(Scope(tenant)), tenant, "memories"), err=True)
    if as_json:
        print_json([memory_json(m) for m in found])
        return
    for memory in found:
        click.echo(_memory_line(memory))


@memories.command("show")
@_TENANT
@click.argument("memory_id")
@_JSON
@click.pass_context
def memories_show(ctx: click.Context, tenant: str, memory_id: str, as_json: bool) -> None:
    """One memory with its provenance and validity."""
    with _open_layers(ctx) as (store, _):
        memory = store.get_memory(Scope(tenant), memory_id)
    data = memory_json(memory)
    if as_json:
        print_json(data)
        return
    for key, value in data.items():
        click.echo(f"{key}: {value}")


@memories.command("history")
@_TENANT
@click.argument("memory_id")
@_JSON
@click.pass_context
def memories_history(ctx: click.Context, tenant: str, memory_id: str, as_json: bool) -> None:
    """Every version linked to a memory by updates and merges, oldest first."""
    with _open_layers(ctx) as (_, layers):
        versions = layers.memory_history(Scope(tenant), memory_id)
    if as_json:
        print_json([memory_json(m) for m in versions])
        return
    for memory in versions:
        click.echo(f"{_when(memory.valid_from)}  {_memory_line(memory)}")


@click.group()
def profile() -> None:
    """The L3 profile of a tenant."""


@profile.command("show")
@_TENANT
@click.option("--history", is_flag=True, help="Every version, oldest first.")
@_JSON
@click.pass_context
def profile_show(ctx: click.Context, tenant: str, history: bool, as_json: bool) -> None:
    """The current profile (or all its versions)."""
    with _open_layers(ctx) as (_, layers):
        scope = Scope(tenant)
        current = layers.profile(scope)
        versions = layers.profile_history(scope) if history else [current] if current else []
    if as_json:
        print_json([profile_json(p) for p in versions] if history else
                   (profile_json(current) if current else None))  # fmt: skip
        return
    if not versions:
        click.echo("(no profile yet: run `stratamem flush`)")
    for version in versions:
        when = _when(version.updated_at)
        click.echo(f"# version {version.version} ({version.mode.value}, {when})")
        click.echo(version.body)


@click.group()
def scenes() -> None:
    """The L2 scenes of a tenant."""


@scenes.command("list")
@_TENANT
@_JSON
@click.pass_context
def scenes_list(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """Live scenes, hottest first."""
    with _open_layers(ctx) as (_, layers):
        found = layers.current_scenes(Scope(tenant))
    if as_json:
        print_json([scene_json(s) for s in found])
        return
    for scene in found:
        click.echo(f"{scene.id}  heat {scene.heat:5.1f}  v{scene.version}  {scene.title}:"
                   f" {scene.summary}")  # fmt: skip


@scenes.command("show")
@_TENANT
@click.argument("scene_id")
@click.option("--history", is_flag=True, help="Every version, oldest first.")
@_JSON
@click.pass_context
def scenes_show(
    ctx: click.Context, tenant: str, scene_id: str, history: bool, as_json: bool
) -> None:
    """One scene (or all its versions)."""
    with _open_layers(ctx) as (_, layers):
        versions = layers.scene_history(Scope(tenant), scene_id)
    shown = versions if history else versions[-1:]
    if as_json:
        print_json([scene_json(s) for s in shown] if history else scene_json(shown[0]))
        return
    for scene in shown:
        state = "deleted" if scene.deleted else scene.mode.value
        click.echo(f"# {scene.title} (v{scene.version}, {state}, heat {scene.heat:.1f})")
        click.echo(scene.summary)
        click.echo(scene.body)


@click.command()
@_TENANT
@click.option("--session", default=None, help="Only this session (default: every session).")
@click.option("--limit", type=click.IntRange(1, MAX_REREAD_TURNS), default=500, show_default=True,
              help="The most turns read again.")
@_JSON
@click.pass_context
def reextract(
    ctx: click.Context, tenant: str, session: str | None, limit: int, as_json: bool
) -> None:
    """Extract again the turns a model judged to hold nothing to remember (the turn ledger's
    nothing_to_remember), e.g. after changing the model (with the configured LLM endpoint;
    without one, the offline extractor)."""
    if session is not None:
        check_ident(session, "session")

    async def run() -> tuple[list[dict[str, Any]], dict[str, int]]:
        memory = AsyncMemory.open(settings_from(ctx))
        try:
            results = await memory.layer_service().reread(tenant, session, limit=limit)
            layers = memory.layer_service().layers
            counts = await asyncio.to_thread(layers.outcome_counts, Scope(tenant), session)
            return [r.to_json() for r in results], totals(counts)
        finally:
            await memory.aclose()

    results, outcomes = asyncio.run(run())
    if as_json:
        print_json({"results": results, "turn_outcomes": outcomes})
        return
    read = sum(r["counts"].get("turns", 0) for r in results)
    click.echo(f"{read} turn(s) read again in {len(results)} batch(es)")
    click.echo(outcome_line(outcomes))


def outcome_line(counts: dict[str, int]) -> str:
    """`extracted 12 · nothing_to_remember 3 · …`, the outcomes that have turns."""
    shown = [f"{name} {n}" for name, n in counts.items() if n]
    return " · ".join(shown) or "no turns"
