"""`stratamem llm check`: what the configured LLM endpoint supports, and whether it is usable."""

from __future__ import annotations

import asyncio
import sys

import click

from stratamem.cli.common import print_json
from stratamem.errors import ConfigError
from stratamem.layers.llm_check import CheckReport, check_endpoint, render
from stratamem.llm import LLMClient, LLMSettings

UNUSABLE_EXIT = 1


@click.group("llm")
def llm() -> None:
    """The LLM endpoint of the memory layers and offload (STRATAMEM_LLM_*)."""


@llm.command("check")
@click.option("--stage", default="L1", show_default=True, help="Whose endpoint settings to use.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check(stage: str, as_json: bool) -> None:
    """The endpoint's structured-output profile, its latency, and whether a tiny extraction
    round-trips; exits 1 when the endpoint is not usable."""
    settings = LLMSettings()
    if not settings.configured:
        raise ConfigError("no LLM endpoint: set STRATAMEM_LLM_BASE_URL and STRATAMEM_LLM_MODEL")

    async def run() -> CheckReport:
        async with LLMClient(settings) as client:
            return await check_endpoint(client, stage)

    report = asyncio.run(run())
    if as_json:
        print_json(report.to_json())
    else:
        click.echo(render(report))
    if not report.usable:
        sys.exit(UNUSABLE_EXIT)
