"""The `stratamem` command: a thin shell over the library."""

from __future__ import annotations

from pathlib import Path

import click

from stratamem.cli.pipeline_cmds import bench, pipeline, worker


@click.group()
@click.version_option(package_name="stratamem")
@click.option(
    "--data-dir",
    envvar="STRATAMEM_DATA_DIR",
    type=click.Path(path_type=Path),
    default=Path("./stratamem-data"),
    help="Data directory.",
)
@click.pass_context
def cli(ctx: click.Context, data_dir: Path) -> None:
    """stratamem: layered long-term memory for AI agents."""
    ctx.ensure_object(dict)
    ctx.obj["data_dir"] = data_dir


cli.add_command(worker)
cli.add_command(pipeline)
cli.add_command(bench)


def main() -> None:
    cli()
