"""A schema migration, and the DDL both databases share, written once (`render`).

A table both databases hold is defined once, in its record family's `schema.py`
(`store/core/schema.py`, `store/layers/schema.py`, …), as DDL with a few placeholders where the
databases spell a type differently, and lines that only one of them has:

| written       | SQLite                | PostgreSQL                                      |
|---------------|-----------------------|-------------------------------------------------|
| `{rid}`       | `INTEGER PRIMARY KEY` | `BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY` |
| `{float}`     | `REAL`                | `DOUBLE PRECISION` (times are epoch seconds)    |
| `{bigint}`    | `INTEGER`             | `BIGINT`                                        |
| `{bytes}`     | `BLOB`                | `BYTEA`                                         |
| `… -- sqlite only: why` | kept (without the mark) | left out                        |
| `… -- postgres only: why` | left out    | kept (without the mark)                         |

Each database's list of migrations (`store/sqlite/migrations.py`, `store/postgres/schema.py`)
renders them with what is its own (full-text index, vectors, triggers). A migration keeps its
version and its text forever: an existing database records the versions it applied, and a
fresh one must come out the same (`docs/schema/*.sql`, `tests/store/test_schema.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Dialect = Literal["sqlite", "postgres"]

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {"rid": "INTEGER PRIMARY KEY", "float": "REAL", "bigint": "INTEGER",
               "bytes": "BLOB"},
    "postgres": {"rid": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                 "float": "DOUBLE PRECISION", "bigint": "BIGINT", "bytes": "BYTEA"},
}  # fmt: skip
_ONLY = re.compile(r"\s*-- (sqlite|postgres) only\b.*$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def render(template: str, dialect: Dialect) -> str:
    """The DDL `template` as `dialect` spells it (see the module doc)."""
    kept = []
    for line in template.splitlines(keepends=True):
        own = _ONLY.search(line)
        if own is not None and own.group(1) != dialect:
            continue
        if own is not None:
            line_end = "\n" if line.endswith("\n") else ""
            kept.append(line[: own.start()] + line_end)
        else:
            kept.append(line)
    return _PLACEHOLDER.sub(lambda m: _TYPES[dialect][m.group(1)], "".join(kept))


def rendered(dialect: Dialect, migrations: Iterable[Migration]) -> tuple[Migration, ...]:
    """`migrations` with their DDL as `dialect` spells it, by version."""
    return tuple(
        Migration(m.version, m.name, render(m.sql, dialect))
        for m in sorted(migrations, key=lambda m: m.version)
    )
