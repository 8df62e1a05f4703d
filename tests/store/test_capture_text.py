"""A captured turn comes back as it was said and is found by its words, whatever its
characters (quotes, placeholders, percent signs, statement separators, NUL and PostgreSQL's
escape of it), and a batch skips a turn already there: the capture's own indexing
(`store/postgres/capture_index.py`) sees the turns as stored."""

from __future__ import annotations

from stratamem.domain import Layer, Role, Scope, Turn
from stratamem.store.core.port import Filters
from tests.store.conftest import StoreFactory

ACME = Scope("acme")
AWKWARD = [
    "it's 100% done; DROP TABLE turns; -- ?",
    'a "quoted" \\ backslash, $1 and %s and %(name)s',
    "nul \x00 inside, and \U0010fffe0 the escape itself",
    "emoji 🙂 and\nnew\tlines",
]


def test_awkward_text_comes_back_as_it_was_said(open_store: StoreFactory) -> None:
    store = open_store()
    turns = [
        Turn(f"t{i}", ACME.tenant, "s1", Role.USER, text, 1_700_000_000.123456789 + i,
             speaker="O'Brien", metadata={"note": text})
        for i, text in enumerate(AWKWARD)
    ]  # fmt: skip
    for turn in turns:
        store.add_turns(ACME, [turn])
    back = store.get_turns(ACME, [t.id for t in turns])
    assert [(t.text, t.speaker, t.metadata, t.timestamp) for t in back] == [
        (t.text, t.speaker, t.metadata, t.timestamp) for t in turns
    ]
    assert [t.seq for t in back] == [1, 2, 3, 4]
    hits = store.search_text(ACME, Layer.L0, "backslash", Filters(), 5)
    assert hits[0].id == "t1"


def test_a_turn_already_there_is_skipped_in_a_batch(open_store: StoreFactory) -> None:
    store = open_store()
    store.add_turns(ACME, [Turn("a", ACME.tenant, "s1", Role.USER, "first words", 1.0)])
    stored = store.add_turns(ACME, [
        Turn("a", ACME.tenant, "s1", Role.USER, "first words", 1.0),
        Turn("b", ACME.tenant, "s1", Role.USER, "second words", 2.0),
    ])  # fmt: skip
    assert [(t.id, t.seq) for t in stored] == [("b", 2)]
    assert store.search_text(ACME, Layer.L0, "second", Filters(), 5)[0].id == "b"
