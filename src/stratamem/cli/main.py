"""The `stratamem` command: a thin shell over the library."""

from __future__ import annotations

import os
from pathlib import Path

import click

from stratamem.cli import (
    envcheck,
    eval_cmds,
    failures_cmds,
    llm_cmds,
    memory_cmds,
    migrate_cmds,
    model_cmds,
    offload_cmds,
    service_cmds,
)
from stratamem.cli.exits import MappedGroup
from stratamem.cli.layers_cmds import LAYER_COMMANDS
from stratamem.cli.pipeline_cmds import bench, pipeline, worker


@click.group(cls=MappedGroup)
@click.version_option(package_name="stratamem")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="STRATAMEM_DATA_DIR",
    default=None,
    help="Directory of the embedded store [env STRATAMEM_DATA_DIR; default ./stratamem-data].",
)
@click.option(
    "--embedder",
    default=None,
    help="local | local:fp32 | local:int8 | onnx:DIR | st | hash[:DIM] | openai:MODEL | none"
    " [env STRATAMEM_EMBEDDER; default local].",
)
@click.pass_context
def cli(ctx: click.Context, data_dir: Path | None, embedder: str | None) -> None:
    """stratamem: layered long-term memory for AI agents."""
    for line in envcheck.warnings(os.environ):
        click.echo(line, err=True)
    ctx.ensure_object(dict)
    ctx.obj["data_dir"] = data_dir
    ctx.obj["embedder"] = embedder


for command in (
    memory_cmds.capture,
    memory_cmds.search,
    memory_cmds.recall,
    memory_cmds.import_,
    memory_cmds.reindex,
    memory_cmds.erase,
    memory_cmds.stats,
    model_cmds.prepare,
    worker,
    pipeline,
    bench,
):
    cli.add_command(command)
cli.add_command(eval_cmds.eval_group)


for command in LAYER_COMMANDS:
    cli.add_command(command)
cli.add_command(offload_cmds.offload)
cli.add_command(failures_cmds.failures)
cli.add_command(llm_cmds.llm)
cli.add_command(service_cmds.serve)
cli.add_command(service_cmds.tenants)
cli.add_command(service_cmds.keys)
cli.add_command(service_cmds.mcp)
cli.add_command(migrate_cmds.migrate)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
