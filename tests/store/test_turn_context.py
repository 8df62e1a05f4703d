"""Turns are full-text indexed with their neighbours and their date (migration 4)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratamem.domain import Layer, Role, Scope, Turn
from stratamem.store.core.port import NO_FILTERS, TurnFieldWeights
from stratamem.store.core.scope_tokens import tenant_token
from stratamem.store.core.tenant_words import tenant_words
from stratamem.store.sqlite import SqliteStore
from stratamem.store.sqlite.connection import connect
from stratamem.store.sqlite.migrations import MIGRATIONS, migrate

SCOPE = Scope("t1")
MAY_8_2023 = 1683554160.0


def turn(n: int, text: str, session: str = "s1", speaker: str = "Ann") -> Turn:
    return Turn(
        id=f"{session}-{n}", tenant="t1", session=session, role=Role.USER, text=text,
        timestamp=MAY_8_2023 + n, speaker=speaker,
    )


DIALOGUE = [
    turn(1, "Any tips for getting started with pottery?", speaker="Ann"),
    turn(2, "Buy a small bag of clay and take one evening class.", speaker="Bo"),
    turn(3, "Thanks, I will.", speaker="Ann"),
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "store.db")
    yield opened
    opened.close()


def ids(store: SqliteStore, query: str) -> list[str]:
    return [c.id for c in store.search_text(SCOPE, Layer.L0, query, NO_FILTERS, 10)]


def test_a_reply_is_found_by_the_words_of_the_question_before_it(store: SqliteStore) -> None:
    store.add_turns(SCOPE, DIALOGUE)
    found = ids(store, "tips for getting started with pottery")
    assert found[:2] == ["s1-1", "s1-2"]  # the question itself first, then its answer


def test_own_words_rank_above_a_neighbours_words(store: SqliteStore) -> None:
    store.add_turns(SCOPE, DIALOGUE)
    assert ids(store, "clay evening class")[0] == "s1-2"


def test_the_next_turn_is_indexed_once_it_arrives(store: SqliteStore) -> None:
    store.add_turns(SCOPE, DIALOGUE[:1])
    assert ids(store, "clay") == []
    store.add_turns(SCOPE, DIALOGUE[1:])
    assert "s1-1" in ids(store, "clay")


def test_neighbours_stay_within_their_session(store: SqliteStore) -> None:
    store.add_turns(SCOPE, [*DIALOGUE, turn(4, "Lovely weather today.", session="s2")])
    assert ids(store, "lovely weather") == ["s2-4"]


def test_the_date_is_searchable_in_words(store: SqliteStore) -> None:
    store.add_turns(SCOPE, DIALOGUE)
    assert set(ids(store, "May 2023")) == {"s1-1", "s1-2", "s1-3"}


def test_existing_turns_are_indexed_by_the_migration(tmp_path: Path) -> None:
    conn = connect(tmp_path / "old.db")
    migrate(conn, MIGRATIONS[:3])
    for seq, t in enumerate(DIALOGUE, start=1):
        conn.execute(
            "INSERT INTO turns (tenant, id, session, seq, role, speaker, text, ts, created_at,"
            " scope_token) VALUES (?, ?, ?, ?, 'user', ?, ?, ?, ?, ?)",
            ("t1", t.id, t.session, seq, t.speaker, t.text, t.timestamp, t.timestamp,
             tenant_token("t1")),
        )
    assert migrate(conn)[:2] == [4, 5]  # (then the layers' and offload's own)
    row = conn.execute("SELECT context, around, dated FROM turns_fts WHERE rowid = 2").fetchone()
    expected = (DIALOGUE[0].text, DIALOGUE[2].text, "8 May 2023")
    assert tuple(row) == tuple(tenant_words("t1", text) for text in expected)
    conn.close()


def test_deleted_turns_leave_the_index(tmp_path: Path, store: SqliteStore) -> None:
    store.add_turns(SCOPE, DIALOGUE)
    conn = sqlite3.connect(store.path)
    conn.execute("DELETE FROM turns WHERE id = 's1-2'")
    conn.commit()
    conn.close()
    assert "s1-2" not in ids(store, "clay evening class")


def test_field_weights_choose_which_fields_rank(store: SqliteStore) -> None:
    """A field weighted 0 still matches but adds nothing; the weights reorder the hits."""
    store.add_turns(SCOPE, DIALOGUE)
    only_text = TurnFieldWeights(text=1.0, speaker=0.0, context=0.0, around=0.0, dated=0.0)
    only_context = TurnFieldWeights(text=0.0, speaker=0.0, context=1.0, around=0.0, dated=0.0)

    def ranked(fields: TurnFieldWeights) -> list[str]:
        found = store.search_text(SCOPE, Layer.L0, "pottery", NO_FILTERS, 10, fields=fields)
        return [c.id for c in found]

    assert ranked(only_text)[0] == "s1-1"  # "pottery" is in turn 1's own words
    assert ranked(only_context)[0] == "s1-2"  # … and in the context field of turn 2
    assert ranked(TurnFieldWeights()) == ids(store, "pottery")  # None means the defaults
