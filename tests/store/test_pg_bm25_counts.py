"""PostgreSQL BM25 reads the tenant's row count one statement before its document frequencies:
rows committed in between make a word's frequency exceed that count, which must lower the
word's weight to FTS5's floor, not fail the search (found by tests/topology: a recall racing
with captures answered 500 `cannot take logarithm of a negative number`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters
from stratamem.store.opening import open_url
from tests.stores import fresh_pg_url

from .helpers import turn

pytestmark = pytest.mark.postgres


def test_a_word_in_more_rows_than_the_count_read_before_is_still_found(
    pg_server: str, tmp_path: Path
) -> None:
    import psycopg  # noqa: PLC0415 - only with the postgres extra

    url = fresh_pg_url(pg_server)
    store = open_url(url, tmp_path / "unused.db")
    try:
        store.add_turns(Scope("acme"), [turn(f"t{i}", f"the quokka museum {i}") for i in range(3)])
        with psycopg.connect(url, autocommit=True) as conn:  # the count as read before two commits
            conn.execute("UPDATE text_totals SET rows = 1 WHERE tenant = 'acme'")
        found = store.search_text(Scope("acme"), Layer.L0, "quokka museum", Filters(), 10)
    finally:
        store.close()
    assert sorted(c.id for c in found) == ["t0", "t1", "t2"]
