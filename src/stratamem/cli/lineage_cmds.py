"""CLI commands over lineage: why something is known (`lineage`), and a tenant's whole memory
out and in (`export`, `import-export`: `stratamem.export`)."""

from __future__ import annotations

import click

from stratamem.cli.common import open_memory, print_json


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
