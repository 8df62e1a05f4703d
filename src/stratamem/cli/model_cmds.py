"""`stratamem prepare`: build and load the configured embedder's model ahead of its first use."""

from __future__ import annotations

import asyncio
import time

import click

from stratamem.cli.common import settings_from
from stratamem.embed import Embedder, make_embedder
from stratamem.embed.base import preload
from stratamem.errors import EmbeddingError


@click.command()
@click.pass_context
def prepare(ctx: click.Context) -> None:
    """Load the configured embedder now: the local model's ONNX graph is built into the model
    cache if it is not there yet. Prints the model, its width and the seconds it took."""
    settings = settings_from(ctx)
    embedder = make_embedder(
        settings.embedder,
        base_url=settings.embed_base_url,
        api_key=settings.embed_api_key,
        dim=settings.embed_dim,
        onnx_spinning=settings.onnx_spinning,
    )
    if embedder is None:
        click.echo("no embedder: search runs on BM25 alone")
        return
    started = time.perf_counter()
    asyncio.run(_load(embedder))
    seconds = time.perf_counter() - started
    click.echo(f"{embedder.model}: {_width(embedder)}, ready in {seconds:.2f} s")


async def _load(embedder: Embedder) -> None:
    try:
        await preload(embedder)
    finally:
        await embedder.aclose()


def _width(embedder: Embedder) -> str:
    try:
        return f"{embedder.dim} dimensions"
    except EmbeddingError:
        return "width known at its first call"
