"""The `stratamem` command: a thin shell over the library."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="stratamem")
def cli() -> None:
    """stratamem: layered long-term memory for AI agents."""


def main() -> None:
    cli()
