"""CLI commands over lineage: why something is known (`lineage`), and a tenant's whole memory
out and in (`export`, `import-export`: `stratamem.export`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from stratamem.cli.common import open_memory, print_json
from stratamem.errors import InvalidInput
from stratamem.files import create_private


@click.command()
@click.option("--tenant", required=True, help="The tenant whose record is traced.")
@click.option("--memory", "memory_id", default=None, help="A memory's id.")
@click.option("--scene", "scene_id", default=None, help="A scene's id.")
@click.option("--profile", "of_profile", is_flag=True, help="The tenant's profile.")
@click.option("--version", type=click.IntRange(min=0), default=0,
              help="The scene or profile version (0, the default: the current).")  # fmt: skip
@click.pass_context
def lineage(
    ctx: click.Context,
    tenant: str,
    memory_id: str | None,
    scene_id: str | None,
    of_profile: bool,
    version: int,
) -> None:
    """Why something is known: what a memory, scene or profile version was built from (turns,
    memories, scene versions) and what was built from it, as JSON."""
    if sum([memory_id is not None, scene_id is not None, of_profile]) != 1:
        raise click.UsageError("name one of --memory ID, --scene ID or --profile")
    with open_memory(ctx, existing=True) as memory:
        if memory_id is not None:
            found = memory.memory_lineage(tenant, memory_id)
        elif scene_id is not None:
            found = memory.scene_lineage(tenant, scene_id, version)
        else:
            found = memory.profile_lineage(tenant, version)
    print_json(found.to_json())


@click.command("export")
@click.option("--tenant", required=True, help="The tenant whose memory is exported.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the JSONL here (default: standard output).")  # fmt: skip
@click.pass_context
def export_(ctx: click.Context, tenant: str, out: Path | None) -> None:
    """Write everything held about a tenant as versioned JSONL: turns, memories with their
    versions and lineage, scenes, profile, offload entries and refs, the embedding model named
    (docs/forgetting.md#export-and-import)."""
    with open_memory(ctx, existing=True, verify_embedding=False) as memory:
        lines = memory.export_tenant(tenant)
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    if out is None:
        click.echo(text, nl=False)
        return
    create_private(out)
    out.write_text(text, encoding="utf-8")
    click.echo(f"exported {len(lines) - 1} records of tenant {tenant!r} to {out}", err=True)


@click.command("import-export")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", default=None, help="Load under this tenant (default: the export's).")
@click.pass_context
def import_export(ctx: click.Context, path: Path, tenant: str | None) -> None:
    """Load a `stratamem export` file into this store (SQLite or PostgreSQL), keeping ids and
    validity; the records are embedded again with this store's model. The tenant must hold
    nothing here yet."""
    lines = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{number}: not JSON: {exc}") from exc
    with open_memory(ctx) as memory:
        counts = memory.import_export(lines, tenant)
        memory.embed_pending()
    print_json({"tenant": tenant or lines[0].get("tenant"), "imported": counts})
