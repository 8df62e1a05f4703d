"""The store contract, run against every implementation (see conftest.FACTORIES)."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from stratamem.domain import Hit, Layer, MemoryType, Scope
from stratamem.errors import (
    EmbeddingMismatch,
    MemoryChanged,
    NotFound,
    StaleFencingToken,
    StoreError,
)
from stratamem.store.core.port import EmbeddingInfo, Fence, Filters, Store
from tests.store.conftest import StoreFactory
from tests.store.helpers import T0, memory, turn, unit

ACME = Scope("acme")


def test_add_turns_is_idempotent_and_assigns_session_order(store: Store) -> None:
    first = store.add_turns(ACME, [turn("t1", "hello"), turn("t2", "world")])
    again = store.add_turns(ACME, [turn("t2", "world"), turn("t3", "again")])
    assert [t.id for t in first] == ["t1", "t2"]
    assert [t.id for t in again] == ["t3"]
    assert [(t.id, t.seq) for t in store.list_turns(ACME, "s1")] == [
        ("t1", 1),
        ("t2", 2),
        ("t3", 3),
    ]


def test_turns_survive_reopen(open_store: StoreFactory) -> None:
    store = open_store()
    store.add_turns(ACME, [turn("t1", "kept across restarts")])
    store.close()
    reopened = open_store()
    assert [t.text for t in reopened.get_turns(ACME, ["t1"])] == ["kept across restarts"]


def test_get_turns_keeps_the_asked_order_and_skips_unknown(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "a"), turn("t2", "b")])
    assert [t.id for t in store.get_turns(ACME, ["t2", "nope", "t1"])] == ["t2", "t1"]


def test_list_turns_pages_by_sequence(store: Store) -> None:
    store.add_turns(ACME, [turn(f"t{i}", f"text {i}") for i in range(1, 6)])
    page = store.list_turns(ACME, "s1", after_seq=2, limit=2)
    assert [t.seq for t in page] == [3, 4]


def test_list_sessions_in_time_order(store: Store) -> None:
    store.add_turns(ACME, [turn("a", "x", session="late", ts=T0 + 10)])
    store.add_turns(ACME, [turn("b", "y", session="early", ts=T0)])
    assert store.list_sessions(ACME) == ["early", "late"]


def test_sessions_with_data_names_each_once_and_only_the_tenants(store: Store) -> None:
    store.add_turns(ACME, [turn("a", "x", session="late"), turn("b", "y", session="late")])
    store.add_turns(ACME, [turn("c", "z", session="early")])
    store.add_turns(Scope("other"), [turn("d", "w", session="theirs")])
    assert store.sessions_with_data(ACME) == ["early", "late"]
    assert store.sessions_with_data(Scope("nobody")) == []


def test_upsert_memories_replaces_by_id(store: Store) -> None:
    store.upsert_memories(ACME, [memory("m1", "likes tea")])
    store.upsert_memories(ACME, [memory("m1", "likes green tea")])
    assert store.get_memory(ACME, "m1").content == "likes green tea"
    assert len(store.list_memories(ACME)) == 1


def test_get_unknown_memory_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.get_memory(ACME, "missing")


def test_list_memories_filters_by_type_and_validity(store: Store) -> None:
    store.upsert_memories(
        ACME,
        [
            memory("p", "is a nurse", mtype=MemoryType.PERSONA),
            memory("e", "went hiking"),
            memory("old", "lived in Oslo", valid_to=T0 + 5),
        ],
    )
    persona = store.list_memories(ACME, Filters(types=(MemoryType.PERSONA,)))
    assert [m.id for m in persona] == ["p"]
    assert {m.id for m in store.list_memories(ACME)} == {"p", "e"}
    assert "old" in {m.id for m in store.list_memories(ACME, Filters(as_of=T0 + 1))}


def test_fenced_write_under_an_older_token_is_refused(store: Store) -> None:
    store.upsert_memories(ACME, [memory("m1", "v1")], fence=Fence("acme/s1", 5))
    with pytest.raises(StaleFencingToken) as refused:
        store.upsert_memories(ACME, [memory("m1", "stale")], fence=Fence("acme/s1", 4))
    assert refused.value.newest == 5  # a grant must be above it (`PipelineBackend.raise_fence`)
    assert store.get_memory(ACME, "m1").content == "v1"
    store.upsert_memories(ACME, [memory("m1", "v2")], fence=Fence("acme/s1", 6))
    assert store.newest_fence("acme/s1") == 6


def test_an_equal_token_is_accepted_only_from_the_owner_it_was_recorded_for(store: Store) -> None:
    for n in range(3):  # one holder writes many times under its token
        store.upsert_memories(ACME, [memory("m1", f"a{n}")], fence=Fence("acme/s1", 5, "a"))
    with pytest.raises(StaleFencingToken) as refused:  # the counter granted 5 twice
        store.upsert_memories(ACME, [memory("m1", "b")], fence=Fence("acme/s1", 5, "b"))
    assert refused.value.newest == 5  # the grant's own token: `behind_the_store` puts it back
    with pytest.raises(StaleFencingToken):  # an ownerless write cannot prove it is "a"
        store.upsert_memories(ACME, [memory("m1", "none")], fence=Fence("acme/s1", 5))
    assert store.get_memory(ACME, "m1").content == "a2"
    store.upsert_memories(ACME, [memory("m1", "a3")], fence=Fence("acme/s1", 5, "a"))
    assert store.get_memory(ACME, "m1").content == "a3"


def test_a_greater_token_takes_the_fence_over_with_its_owner(store: Store) -> None:
    store.upsert_memories(ACME, [memory("m1", "a")], fence=Fence("acme/s1", 5, "a"))
    store.upsert_memories(ACME, [memory("m1", "b")], fence=Fence("acme/s1", 6, "b"))
    for fence in (Fence("acme/s1", 5, "a"), Fence("acme/s1", 6, "a")):
        with pytest.raises(StaleFencingToken):
            store.upsert_memories(ACME, [memory("m1", "a again")], fence=fence)
    store.upsert_memories(ACME, [memory("m1", "b2")], fence=Fence("acme/s1", 6, "b"))
    assert store.get_memory(ACME, "m1").content == "b2"
    assert store.newest_fence("acme/s1") == 6


def test_a_fence_recorded_without_owner_accepts_its_token_from_anyone(store: Store) -> None:
    """As every row did before owners were recorded (rows from before migration 8)."""
    store.upsert_memories(ACME, [memory("m1", "legacy")], fence=Fence("acme/s1", 5))
    for owner in ("a", "b", None, "a"):  # and keeps no owner: the first is not taken for it
        store.upsert_memories(ACME, [memory("m1", f"{owner}")], fence=Fence("acme/s1", 5, owner))
    with pytest.raises(StaleFencingToken):
        store.upsert_memories(ACME, [memory("m1", "old")], fence=Fence("acme/s1", 4, "a"))
    store.upsert_memories(ACME, [memory("m1", "new")], fence=Fence("acme/s1", 6, "c"))
    with pytest.raises(StaleFencingToken):  # from then on, its owner's
        store.upsert_memories(ACME, [memory("m1", "b")], fence=Fence("acme/s1", 6, "b"))
    assert store.get_memory(ACME, "m1").content == "new"


def test_fences_accept_what_the_rule_says_over_random_writes(store: Store) -> None:
    """Invariant: a write is accepted iff its token is above the recorded one, or equal and
    from the recorded owner (or the recorded one has none); so a token taken over by an owner
    is accepted from that owner alone."""
    rng, recorded = random.Random(8), (0, None)
    taken: dict[int, str | None] = {}  # token -> the owner that took the fence over with it
    accepted: dict[int, set[str | None]] = {}
    for n in range(120):
        token = max(1, recorded[0] + rng.choice([-1, 0, 0, 0, 1]))  # mostly contended ones
        owner = rng.choice(["a", "b", "c", None])
        expected = token > recorded[0] or (token == recorded[0] and recorded[1] in (None, owner))
        try:
            store.upsert_memories(ACME, [memory("m", str(n))], fence=Fence("k", token, owner))
        except StaleFencingToken as exc:
            assert not expected, (n, token, owner, recorded)
            assert exc.newest == recorded[0]
            continue
        assert expected, (n, token, owner, recorded)
        if token > recorded[0]:
            recorded, taken[token] = (token, owner), owner
        accepted.setdefault(token, set()).add(owner)
    assert len(taken) > 5 and any(len(owners) > 1 for owners in accepted.values())
    for token, owners in accepted.items():
        assert taken[token] is None or owners == {taken[token]}, (token, owners)
    assert store.newest_fence("k") == recorded[0]


def test_bm25_finds_and_ranks_turns_and_memories(store: Store) -> None:
    store.add_turns(
        ACME,
        [turn("t1", "we talked about the weather"), turn("t2", "my sister plays the violin")],
    )
    store.upsert_memories(ACME, [memory("m1", "Ann's sister is a violinist")])
    hits = store.search_text(ACME, Layer.L0, "violin sister", Filters(), 10)
    assert [h.id for h in hits] == ["t2", "t1"]  # t1 matches through its neighbour t2, below it
    assert [h.id for h in store.search_text(ACME, Layer.L1, "sister", Filters(), 10)] == ["m1"]


def test_bm25_query_syntax_is_never_interpreted(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "quotes \" and stars * and NEAR( parens")])
    for query in ['"', "*", "NEAR(", "a OR", "-x", "col:val", "'); DROP TABLE turns; --"]:
        store.search_text(ACME, Layer.L0, query, Filters(), 5)
    assert store.search_text(ACME, Layer.L0, "stars", Filters(), 5)[0].id == "t1"


def test_words_in_max_rows_rows_or_more_are_left_out_whatever_the_share(store: Store) -> None:
    """Below the share's floor (200 rows) only `max_rows` leaves a word out."""
    store.upsert_memories(
        ACME,
        [memory(f"k{i}", f"kayak trip number {i}") for i in range(4)]
        + [memory("c1", "a canoe on the lake"), memory("c2", "the canoe again")],
    )
    query = "kayak canoe"
    every = {h.id for h in store.search_text(ACME, Layer.L1, query, Filters(), 10, max_share=0.05)}
    assert every == {"k0", "k1", "k2", "k3", "c1", "c2"}
    bounded = store.search_text(ACME, Layer.L1, query, Filters(), 10, max_rows=3)
    assert {h.id for h in bounded} == {"c1", "c2"}
    both = store.search_text(ACME, Layer.L1, query, Filters(), 10, max_share=0.05, max_rows=2)
    assert both == []


def test_bm25_filters_by_session_and_time(store: Store) -> None:
    store.add_turns(
        ACME,
        [
            turn("t1", "coffee in the morning", session="s1", ts=T0),
            turn("t2", "coffee at night", session="s2", ts=T0 + 100),
        ],
    )
    only_s2 = store.search_text(ACME, Layer.L0, "coffee", Filters(sessions=("s2",)), 10)
    assert [h.id for h in only_s2] == ["t2"]
    early = store.search_text(ACME, Layer.L0, "coffee", Filters(until=T0 + 50), 10)
    assert [h.id for h in early] == ["t1"]


def test_embeddings_pending_then_stored(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "alpha"), turn("t2", "beta")])
    pending = store.pending_embeddings(Layer.L0, 10)
    assert [(p.id, p.text) for p in pending] == [("t1", "Ann: alpha"), ("t2", "Ann: beta")]
    store.store_embeddings(Layer.L0, [("acme", "t1")], unit(1)[None, :])
    assert [p.id for p in store.pending_embeddings(Layer.L0, 10)] == ["t2"]


def test_vector_search_orders_by_cosine_and_applies_filters(store: Store) -> None:
    store.add_turns(
        ACME, [turn("t1", "a", session="s1"), turn("t2", "b", session="s2"), turn("t3", "c")]
    )
    vectors = np.stack([unit(1), unit(2), unit(3)])
    store.store_embeddings(Layer.L0, [("acme", "t1"), ("acme", "t2"), ("acme", "t3")], vectors)
    best = store.search_vector(ACME, Layer.L0, unit(2), Filters(), 3)
    assert best[0].id == "t2"
    assert best[0].score == pytest.approx(1.0, abs=1e-5)
    in_s1 = store.search_vector(ACME, Layer.L0, unit(2), Filters(sessions=("s1",)), 3)
    assert {c.id for c in in_s1} == {"t1", "t3"}


def test_vector_filter_falls_back_when_neighbours_are_filtered_out(store: Store) -> None:
    turns = [turn(f"t{i}", f"x{i}", session="busy") for i in range(40)]
    turns.append(turn("rare", "y", session="quiet"))
    store.add_turns(ACME, turns)
    vectors = np.stack([unit(i) for i in range(41)])
    store.store_embeddings(Layer.L0, [("acme", t.id) for t in turns], vectors)
    hits = store.search_vector(ACME, Layer.L0, unit(0), Filters(sessions=("quiet",)), 2)
    assert [h.id for h in hits] == ["rare"]


def test_vector_search_sees_vectors_written_by_another_connection(
    open_store: StoreFactory,
) -> None:
    reader, writer = open_store(), open_store()
    writer.add_turns(ACME, [turn("t1", "a")])
    writer.store_embeddings(Layer.L0, [("acme", "t1")], unit(1)[None, :])
    assert [c.id for c in reader.search_vector(ACME, Layer.L0, unit(1), Filters(), 1)] == ["t1"]
    writer.add_turns(ACME, [turn("t2", "b")])
    writer.store_embeddings(Layer.L0, [("acme", "t2")], unit(2)[None, :])
    assert reader.search_vector(ACME, Layer.L0, unit(2), Filters(), 1)[0].id == "t2"


def test_vector_search_follows_what_another_connection_changed_and_re_embedded(
    open_store: StoreFactory,
) -> None:
    reader, writer = open_store(), open_store()
    writer.upsert_memories(ACME, [memory("m1", "first"), memory("m2", "second")])
    writer.store_embeddings(Layer.L1, [("acme", "m1"), ("acme", "m2")],
                            np.stack([unit(1), unit(2)]))  # fmt: skip
    assert reader.search_vector(ACME, Layer.L1, unit(1), Filters(), 2)[0].id == "m1"
    writer.upsert_memories(ACME, [memory("m1", "changed")])  # its old vector no longer counts
    assert [c.id for c in reader.search_vector(ACME, Layer.L1, unit(1), Filters(), 2)] == ["m2"]
    writer.store_embeddings(Layer.L1, [("acme", "m1")], unit(3)[None, :])
    [best] = reader.search_vector(ACME, Layer.L1, unit(3), Filters(), 1)
    assert best.id == "m1" and best.score == pytest.approx(1.0)


def test_changed_memory_content_needs_a_new_embedding(store: Store) -> None:
    store.upsert_memories(ACME, [memory("m1", "first")])
    store.store_embeddings(Layer.L1, [("acme", "m1")], unit(1)[None, :])
    store.upsert_memories(ACME, [memory("m1", "first")])
    assert store.pending_embeddings(Layer.L1, 10) == []
    store.upsert_memories(ACME, [memory("m1", "second")])
    assert [p.text for p in store.pending_embeddings(Layer.L1, 10)] == ["second"]


def test_embedding_model_is_recorded_and_a_mismatch_names_reindex(store: Store) -> None:
    store.bind_embedding(EmbeddingInfo("model-a", 8))
    store.bind_embedding(EmbeddingInfo("model-a", 8))
    with pytest.raises(EmbeddingMismatch, match="stratamem reindex"):
        store.bind_embedding(EmbeddingInfo("model-b", 16))


def test_reset_embeddings_drops_vectors_and_rebinds(store: Store) -> None:
    store.bind_embedding(EmbeddingInfo("model-a", 8))
    store.add_turns(ACME, [turn("t1", "a")])
    store.store_embeddings(Layer.L0, [("acme", "t1")], unit(1)[None, :])
    assert store.search_vector(ACME, Layer.L0, unit(1), Filters(), 1)
    assert store.reset_embeddings(EmbeddingInfo("model-b", 16)) == 1
    assert store.embedding_info() == EmbeddingInfo("model-b", 16)
    assert store.search_vector(ACME, Layer.L0, unit(1, 16), Filters(), 1) == []
    assert [p.id for p in store.pending_embeddings(Layer.L0, 5)] == ["t1"]


def test_load_hits_carries_display_fields(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "hello there")])
    store.upsert_memories(ACME, [memory("m1", "greets people", mtype=MemoryType.PERSONA)])
    store.upsert_memories(ACME, [memory("m2", "went sailing", session=None, activity=T0 - 5)])
    l0 = store.load_hits(ACME, Layer.L0, ["t1"])["t1"]
    l1 = store.load_hits(ACME, Layer.L1, ["m1", "m2", "unknown"])
    assert l0 == Hit("t1", Layer.L0, "hello there", "s1", 0.0, T0, speaker="Ann")
    assert l1 == {
        "m1": Hit("m1", Layer.L1, "greets people", "s1", 0.0, T0,
                  memory_type=MemoryType.PERSONA, source_turn_ids=("t1",)),
        "m2": Hit("m2", Layer.L1, "went sailing", None, 0.0, T0 - 5,
                  memory_type=MemoryType.EPISODIC, source_turn_ids=("t1",)),
    }  # fmt: skip


def test_stats_count_records_and_pending_embeddings(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "a"), turn("t2", "b", session="s2")])
    store.upsert_memories(ACME, [memory("m1", "x")])
    stats = store.stats(ACME)
    assert stats["L0"] == {"records": 2, "pending_embeddings": 2}
    assert stats["L1"] == {"records": 1, "pending_embeddings": 1}
    assert stats["sessions"] == 2


def test_a_turn_is_embedded_as_its_sentences_each_with_the_speaker(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "We hiked the coast. The views were stunning!")])
    store.add_turns(ACME, [turn("t2", "Just one sentence here.")])
    pending = {p.id: p.texts for p in store.pending_embeddings(Layer.L0, 10)}
    assert pending == {
        "t1": ("Ann: We hiked the coast.", "Ann: The views were stunning!"),
        "t2": ("Ann: Just one sentence here.",),
    }


def test_a_record_with_several_vectors_scores_as_its_best_one(store: Store) -> None:
    store.add_turns(ACME, [turn("t1", "a. b."), turn("t2", "c")])
    vectors = np.stack([unit(1), unit(2), unit(3)])
    store.store_embeddings(Layer.L0, [("acme", "t1"), ("acme", "t2")], vectors, counts=[2, 1])
    assert store.pending_embeddings(Layer.L0, 10) == []
    hits = store.search_vector(ACME, Layer.L0, unit(2), Filters(), 5)
    assert [h.id for h in hits] == ["t1", "t2"]  # each record once, at its best vector
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_vector_counts_that_do_not_add_up_are_refused_and_nothing_is_written(
    store: Store,
) -> None:
    store.add_turns(ACME, [turn("t1", "a"), turn("t2", "b")])
    vectors = np.stack([unit(1), unit(2), unit(3)])
    for counts in ([1, 1], [3, 0], [1]):
        with pytest.raises(StoreError):
            store.store_embeddings(Layer.L0, [("acme", "t1"), ("acme", "t2")], vectors, counts)
    assert len(store.pending_embeddings(Layer.L0, 10)) == 2


def test_search_text_ranks_adjacent_words_above_scattered_ones(store: Store) -> None:
    store.add_turns(
        ACME,
        [
            turn("scattered", "An opening in cream, a grand act.", session="s1"),
            turn("together", "We will all be at the grand opening with cream, see.", session="s2"),
            *(turn(f"f{i}", f"other words {i}", session=f"f{i}") for i in range(8)),
        ],
    )
    query = "grand opening cream"
    with_phrases = store.search_text(ACME, Layer.L0, query, Filters(), 5)
    assert [h.id for h in with_phrases] == ["together", "scattered"]
    words_only = store.search_text(ACME, Layer.L0, query, Filters(), 5, phrases=False)
    assert [h.id for h in words_only] == ["scattered", "together"]  # the shorter text


def test_an_edit_expecting_a_current_memory_is_refused_once_it_changed(store: Store) -> None:
    store.upsert_memories(ACME, [memory("m1", "likes tea"), memory("m2", "likes jazz")])
    read = store.get_memory(ACME, "m1")
    # meanwhile another writer (the L1 layer, another caller) supersedes m1 ...
    store.upsert_memories(
        ACME,
        [replace(read, valid_to=T0 + 1, superseded_by="m1b"), memory("m1b", "likes green tea")],
        expect_current=["m1"],
    )
    # ... so an edit based on the version read is refused, and writes nothing
    edit = [replace(read, valid_to=T0 + 2, superseded_by="m1c"), memory("m1c", "likes coffee")]
    with pytest.raises(MemoryChanged):
        store.upsert_memories(ACME, edit, expect_current=["m1"])
    assert store.get_memory(ACME, "m1").superseded_by == "m1b"
    with pytest.raises(NotFound):
        store.get_memory(ACME, "m1c")
    forgotten = replace(store.get_memory(ACME, "m2"), valid_to=T0 + 3)
    store.upsert_memories(ACME, [forgotten], expect_current=["m2"])
    with pytest.raises(MemoryChanged):
        store.upsert_memories(ACME, [forgotten], expect_current=["m2"])
    with pytest.raises(NotFound):
        store.upsert_memories(ACME, [memory("m9", "x")], expect_current=["nope"])
