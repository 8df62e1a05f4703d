"""Captures from many threads and processes at once (several store instances on one database):
each session's turns keep one gap-free order, and the text index ends as one writer at a time
would have left it (PostgreSQL indexes each capture in its own transaction, beside the others)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from stratamem.domain import Layer, Scope
from stratamem.store.core.port import Filters
from stratamem.store.opening import open_url
from tests.store.conftest import StoreFactory
from tests.store.helpers import turn
from tests.store.test_ranking_parity import SCOPE, _ranked, _records, same
from tests.stores import fresh_pg_url

ACME = Scope("acme")


def _run_all(jobs: list[Callable[[], None]]) -> None:
    failures: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test thread below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def test_concurrent_captures_keep_each_sessions_order(open_store: StoreFactory) -> None:
    stores = [open_store(), open_store()]
    per_writer = 15

    def writer(n: int) -> Callable[[], None]:
        store, session = stores[n % 2], f"s{n % 2}"
        return lambda: [
            store.add_turns(ACME, [turn(f"w{n}-{i}", f"word{n}x{i} said", session)])
            for i in range(per_writer)
        ]

    _run_all([writer(n) for n in range(4)])
    for session in ("s0", "s1"):
        turns = stores[0].list_turns(ACME, session, limit=1000)
        assert [t.seq for t in turns] == list(range(1, 2 * per_writer + 1))
        assert len({t.id for t in turns}) == 2 * per_writer
    hits = stores[1].search_text(ACME, Layer.L0, "word3x14", Filters(), 5)
    assert hits[0].id == "w3-14"  # then its neighbours, through their context fields


def _untied(ranked: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Equal scores in id order (a store breaks ties by write order, which concurrent captures
    interleave), without the hits tied with the last (which of them made the cut is a tie)."""
    if not ranked:
        return []
    scores = [float(f"{score:.12g}") for _, score in ranked]
    kept = [(hit, score) for hit, score in zip(ranked, scores, strict=True) if score > scores[-1]]
    return [hit for hit, _ in sorted(kept, key=lambda pair: (-pair[1], pair[0][0]))]


@pytest.mark.postgres
def test_concurrent_captures_index_as_one_writer_would(pg_server: str, tmp_path: Path) -> None:
    turns, _, queries = _records()
    sqlite = open_url(None, tmp_path / "s.db")
    url = fresh_pg_url(pg_server)
    postgres = [open_url(url, tmp_path) for _ in range(2)]
    try:
        sqlite.add_turns(SCOPE, turns)
        sessions = sorted({t.session for t in turns})

        def writer(n: int) -> Callable[[], None]:
            mine = [t for t in turns if sessions.index(t.session) % 4 == n]
            return lambda: [postgres[n % 2].add_turns(SCOPE, [t]) for t in mine]

        _run_all([writer(n) for n in range(4)])
        for query in queries:
            expected = _ranked(sqlite, Layer.L0, query)
            found = _ranked(postgres[0], Layer.L0, query)
            assert same(_untied(found), _untied(expected)), query
    finally:
        for store in (sqlite, *postgres):
            store.close()
