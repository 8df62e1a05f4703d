"""What the two dialects' schema introspection shares (`sqlite/introspect.py`,
`postgres/introspect.py`): the current-schema file's layout, and a column as the parity test
compares it (name, what its type means, nullability, default).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Type names as each database spells them → what they hold.
_MEANINGS = {
    "text": "text",
    "integer": "integer",
    "int": "integer",
    "bigint": "integer",
    "smallint": "integer",
    "real": "float",
    "double precision": "float",
    "blob": "bytes",
    "bytea": "bytes",
    "boolean": "boolean",
}
_CAST = re.compile(r"::[a-z ]+(\[\])?$")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    meaning: str
    not_null: bool
    default: str | None

    def __post_init__(self) -> None:
        if self.default is not None:  # PostgreSQL spells `'{}'` as `'{}'::text`
            object.__setattr__(self, "default", _CAST.sub("", self.default))


def meaning(type_name: str) -> str:
    """What a declared type holds, the same word on both databases (`real[]` → `float[]`)."""
    name = type_name.strip().lower()
    if name.endswith("[]"):
        return meaning(name[:-2]) + "[]"
    return _MEANINGS.get(name, name)


def file_text(
    dialect: str, migrations: Sequence[tuple[int, str]], statements: Sequence[str]
) -> str:
    """A current-schema file: a header naming the migrations it is the sum of, then one
    statement after another."""
    width = len(str(max((v for v, _ in migrations), default=0)))
    header = [
        f"-- The schema of a stratamem store on {dialect}: what a fresh database holds after",
        "-- the migrations below. Written by `make schema` (scripts/schema.py) from a database",
        "-- migrated now; tests/store/test_schema.py fails when the two differ. Not applied",
        "-- from here: change the schema by a new migration, then run `make schema`.",
        "--",
        "-- Migrations:",
        *(f"--   {version:>{width}}  {name}" for version, name in migrations),
    ]
    return "\n".join(header) + "\n\n" + "\n\n".join(statements) + "\n"
