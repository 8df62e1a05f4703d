"""The PostgreSQL store ranks full text as the SQLite store does: same ids, same order, same
scores, for a conversation's turns (every field weighting) and memories, with and without
phrases and common-word cut-off. One tenant alone in each store (FTS5 counts rows and lengths
over its whole index, PostgreSQL over the tenant's: they agree when the tenant is alone)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from stratamem.datasets.locomo import load
from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Role, Scope, Turn
from stratamem.store.core.port import NO_FILTERS, Filters, TurnFieldWeights
from stratamem.store.opening import RecordStore, open_url
from tests.stores import fresh_pg_url

pytestmark = pytest.mark.postgres
DATA = Path(__file__).parent.parent / "data" / "locomo_sample.json"
SCOPE = Scope("acme")
EXTRA_QUERIES = ["boat grandfather", "orchids greenhouse volunteering", "Lake Wigry in May",
                 "rowing boat", "March 2024", "Priya", "what happened to the dog"]  # fmt: skip
WEIGHTS = [None, TurnFieldWeights(text=1.0, speaker=0.0, context=0.0, around=0.0, dated=0.0),
           TurnFieldWeights(text=2.0, speaker=1.0, context=0.3, around=0.1, dated=0.5)]  # fmt: skip


def _records() -> tuple[list[Turn], list[MemoryRecord], list[str]]:
    sample = load(DATA)[0]
    turns = [
        Turn(t["id"], SCOPE.tenant, session, Role.USER, t["text"], t["timestamp"],
             speaker=t["speaker"])
        for session, messages in sample.sessions.items() for t in messages
    ]  # fmt: skip
    memories = [
        MemoryRecord(f"m{i}", SCOPE.tenant, MemoryType.EPISODIC, t.text, valid_from=t.timestamp,
                     created_at=t.timestamp, updated_at=t.timestamp, mode=Mode.MANUAL)
        for i, t in enumerate(turns)
    ]  # fmt: skip
    return turns, memories, [q.question for q in sample.questions] + EXTRA_QUERIES


@pytest.fixture
def both(pg_server: str, tmp_path: Path) -> Iterator[tuple[RecordStore, RecordStore]]:
    turns, memories, _ = _records()
    stores = (open_url(None, tmp_path / "s.db"), open_url(fresh_pg_url(pg_server), tmp_path))
    for store in stores:
        store.add_turns(SCOPE, turns)
        store.upsert_memories(SCOPE, memories)
    yield stores
    for store in stores:
        store.close()


def _ranked(
    store: RecordStore, layer: Layer, query: str, filters: Filters = NO_FILTERS, **options: object
) -> list[tuple[str, float]]:
    found = store.search_text(SCOPE, layer, query, filters, 20, **options)  # type: ignore[arg-type]
    return [(c.id, c.score) for c in found]


def same(found: list[tuple[str, float]], expected: list[tuple[str, float]]) -> bool:
    """The same ids in the same order, the same scores but for the last bits."""
    return [i for i, _ in found] == [i for i, _ in expected] and [s for _, s in found] == (
        pytest.approx([s for _, s in expected], rel=1e-9)
    )


@pytest.mark.parametrize("fields", WEIGHTS)
@pytest.mark.parametrize("phrases", [True, False])
def test_turns_rank_the_same(
    both: tuple[RecordStore, RecordStore], fields: TurnFieldWeights | None, phrases: bool
) -> None:
    sqlite, postgres = both
    for query in _records()[2]:
        expected = _ranked(sqlite, Layer.L0, query, phrases=phrases, fields=fields)
        assert expected, query
        assert same(_ranked(postgres, Layer.L0, query, phrases=phrases, fields=fields), expected)


@pytest.mark.parametrize("cut", [{}, {"max_share": 0.05}, {"max_rows": 2}])
def test_memories_rank_the_same(
    both: tuple[RecordStore, RecordStore], cut: dict[str, float]
) -> None:
    sqlite, postgres = both
    for query in _records()[2]:
        expected = _ranked(sqlite, Layer.L1, query, **cut)
        assert same(_ranked(postgres, Layer.L1, query, **cut), expected)


def test_filters_apply_the_same(both: tuple[RecordStore, RecordStore]) -> None:
    sqlite, postgres = both
    turns = _records()[0]
    session = turns[-1].session
    filters = Filters(sessions=(session,), since=turns[0].timestamp)
    for query in _records()[2]:
        expected = _ranked(sqlite, Layer.L0, query, filters)
        assert same(_ranked(postgres, Layer.L0, query, filters), expected)


def test_turns_imported_out_of_order_rank_the_same(pg_server: str, tmp_path: Path) -> None:
    """An import keeps each turn's sequence number: the later half of each session written
    first, then the earlier half (whose turns come before ones already indexed), ends as one
    capture of every turn would have left the index."""
    turns, _, queries = _records()
    numbered = []
    for session in sorted({t.session for t in turns}):
        mine = [t for t in turns if t.session == session]
        numbered += [replace(t, seq=n + 1) for n, t in enumerate(mine)]
    half = [t for t in numbered if t.seq > 3], [t for t in numbered if t.seq <= 3]
    sqlite = open_url(None, tmp_path / "s.db")
    postgres = open_url(fresh_pg_url(pg_server), tmp_path)
    try:
        sqlite.add_turns(SCOPE, turns)
        for part in half:
            postgres.import_turns(SCOPE, part)
        for query in queries:
            assert same(_ranked(postgres, Layer.L0, query), _ranked(sqlite, Layer.L0, query))
    finally:
        sqlite.close()
        postgres.close()
