"""The CLI's exit codes: one table from error family to code, applied once, by the root group,
to every command below it (so no command maps, or forgets to map, errors itself)."""

from __future__ import annotations

from typing import Any

import click

from stratamem.errors import (
    ConfigError,
    EmbeddingMismatch,
    InvalidInput,
    NotFound,
    StoreError,
    StratamemError,
)

#: Exit codes: one place maps each error family to one code. The first matching row wins.
EXIT_CODES: tuple[tuple[type[StratamemError], int], ...] = (
    (InvalidInput, 2),
    (NotFound, 3),
    (EmbeddingMismatch, 4),
    (ConfigError, 5),
    (StoreError, 6),
    (StratamemError, 1),
)


def exit_code(error: StratamemError) -> int:
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return 1


class MappedGroup(click.Group):
    """A group whose commands' library errors end as one line on stderr (`error: …`) and their
    family's exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StratamemError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exit_code(exc))
