"""SQL fragments for `Filters`, always with bound parameters, never caller text."""

from __future__ import annotations

from typing import Any

from stratamem.domain import Layer
from stratamem.store.core.port import Filters


def filter_sql(
    layer: Layer, filters: Filters, alias: str, current_checked: bool = False
) -> tuple[str, list[Any]]:
    """A `WHERE` tail (starting with ` AND`) and its parameters, for table alias `alias`.

    `current_checked`: the caller already restricts memories to current ones (the full-text
    scope does), so the tail need not repeat it.
    """
    clauses: list[str] = []
    params: list[Any] = []
    if filters.sessions is not None:
        clauses.append(f"{alias}.session IN ({_marks(filters.sessions)})")
        params.extend(filters.sessions)
    if layer is Layer.L0:
        time_column = f"{alias}.ts"
    else:
        time_column = f"COALESCE({alias}.activity_start, {alias}.valid_from)"
        _memory_clauses(filters, alias, clauses, params, current_checked)
    if filters.since is not None:
        clauses.append(f"{time_column} >= ?")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append(f"{time_column} <= ?")
        params.append(filters.until)
    tail = "".join(f" AND {clause}" for clause in clauses)
    return tail, params


def _memory_clauses(
    filters: Filters, alias: str, clauses: list[str], params: list[Any], current_checked: bool
) -> None:
    if filters.types is not None:
        clauses.append(f"{alias}.type IN ({_marks(filters.types)})")
        params.extend(t.value for t in filters.types)
    if filters.as_of is None:
        if not current_checked:
            clauses.append(f"{alias}.valid_to IS NULL")
    else:
        clauses.append(
            f"{alias}.valid_from <= ? AND ({alias}.valid_to IS NULL OR {alias}.valid_to > ?)"
        )
        params.extend([filters.as_of, filters.as_of])


def _marks(values: tuple[Any, ...]) -> str:
    return ", ".join("?" for _ in values) or "NULL"


