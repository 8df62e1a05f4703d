"""What a bench measures must be there: a store bench checks, before it times anything, that
the tenant it searches holds the rows it was filled with and that each retriever answers, and
stops with a message instead of printing figures of an empty or half-filled store (a crash
during a fill once left an empty PostgreSQL that the next run measured and reported)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters, Store


class NothingToMeasure(SystemExit):
    """The store a bench would measure is not what it was asked to fill; the run stops (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"bench stopped: {message}")


def require_filled(
    store: Store, label: str, scope: Scope, expected: int, queries: Sequence[str],
    vector: np.ndarray,
) -> None:  # fmt: skip
    """`scope` holds `expected` L1 records, and full-text and vector search both answer."""
    held = int(store.stats(scope)[Layer.L1.value]["records"])
    if held != expected:
        raise NothingToMeasure(
            f"{label}: tenant {scope.tenant!r} holds {held} memories, {expected} expected"
            " (an earlier run may have stopped while filling: remove its cache and run again)"
        )
    if not any(store.search_text(scope, Layer.L1, q, Filters(), 10) for q in queries):
        raise NothingToMeasure(f"{label}: full-text search finds nothing in {scope.tenant!r}")
    if not store.search_vector(scope, Layer.L1, vector, Filters(), 10):
        raise NothingToMeasure(f"{label}: vector search finds nothing in {scope.tenant!r}")
