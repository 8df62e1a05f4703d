"""What every CLI command shares: the data directory, the memory (errors are mapped to exit codes
by the root group, `cli.exits`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from stratamem.config import Settings, load_core
from stratamem.errors import ConfigError
from stratamem.store.opening import SQLITE_SCHEME
from stratamem.sync import Memory


def settings_from(ctx: click.Context) -> Settings:
    obj: dict[str, Any] = ctx.ensure_object(dict)
    overrides: dict[str, Any] = {}
    if obj.get("data_dir") is not None:
        overrides["data_dir"] = obj["data_dir"]
    if obj.get("embedder") is not None:
        overrides["embedder"] = obj["embedder"]
    return load_core(**overrides)


def data_dir(ctx: click.Context) -> Path:
    return settings_from(ctx).data_dir


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite file of the store `settings` name; None for a database server's."""
    url = settings.store_url
    if url is None:
        return settings.store_path
    return Path(url.removeprefix(SQLITE_SCHEME)) if url.startswith(SQLITE_SCHEME) else None


def existing_store(settings: Settings) -> Settings:
    """`settings` when their data directory holds a store (or they name a database server's);
    else `ConfigError`, so that a command that only reads never creates an empty store in a
    mistyped directory."""
    path = sqlite_file(settings)
    if path is not None and not path.is_file():
        raise ConfigError(
            f"no store in {path.parent} (no {path.name}): check --data-dir"
            " or STRATAMEM_DATA_DIR; `stratamem capture` or `stratamem import` creates one"
        )
    return settings


@contextmanager
def open_memory(
    ctx: click.Context,
    *,
    background: bool = False,
    verify_embedding: bool = True,
    existing: bool = False,
) -> Iterator[Memory]:
    """The memory of the data directory; with `existing`, only if it already holds a store."""
    settings = settings_from(ctx).model_copy(update={"background_embedding": background})
    if existing:
        existing_store(settings)
    memory = Memory(settings, verify_embedding=verify_embedding)
    try:
        yield memory
    finally:
        memory.close()


def why_nothing(stats: dict[str, Any], tenant: str, what: str) -> str:
    """The line a command prints on stderr when it found nothing: whether the tenant has
    anything at all (a mistyped tenant finds nothing, and said nothing, before)."""
    if not stats["L0"]["records"] and not stats["L1"]["records"]:
        return (
            f"no {what}: tenant {tenant!r} has nothing stored here (no turns, no memories);"
            " check --tenant and --data-dir (`stratamem stats` lists the counts)"
        )
    return f"no {what} (tenant {tenant!r} has {stats['L0']['records']} turns and"  \
        f" {stats['L1']['records']} memories)"


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr; yields the function that advances it."""
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        yield bar.update
