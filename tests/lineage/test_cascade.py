"""What a forget reaches, on the memory graph alone (`store/lineage/cascade.py`)."""

from __future__ import annotations

from stratamem.store.lineage.cascade import Node, cascade, reopened


def node(id: str, *turns: str, by: str | None = None, session: str | None = "s",
         current: bool = True) -> Node:  # fmt: skip
    return Node(id, turns, by, session, current if by is None else False)


def test_a_memory_drawn_only_from_forgotten_turns_goes_and_one_drawn_partly_is_derived_again(
) -> None:  # fmt: skip
    nodes = [node("only", "t1"), node("mixed", "t1", "t2"), node("other", "t3")]
    found = cascade(nodes, {"t1"}, existing_turns={"t1", "t2", "t3"})
    assert found.erased == {"only", "mixed"}
    assert found.rederive == {"mixed": ["t2"]}


def test_a_consumer_of_a_forgotten_memory_loses_the_turns_it_took_from_it() -> None:
    nodes = [node("old", "t1", by="new"), node("new", "t1", "t2")]
    found = cascade(nodes, {"t1"})
    assert found.erased == {"old", "new"} and found.rederive == {"new": ["t2"]}
    named = cascade(nodes, (), forgotten_memories={"old"})
    assert named.erased == {"old", "new"} and named.rederive == {"new": ["t2"]}


def test_a_superseded_version_is_not_derived_again_its_successor_is() -> None:
    nodes = [node("v1", "t1", "t2", by="v2"), node("v2", "t1", "t2", "t3")]
    found = cascade(nodes, {"t1"})
    assert found.rederive == {"v2": ["t2", "t3"]}


def test_naming_a_memory_takes_its_history_and_leaves_the_rest_of_its_turn() -> None:
    nodes = [node("v1", "t1", by="v2"), node("v2", "t1"), node("sibling", "t1")]
    found = cascade(nodes, (), forgotten_memories={"v2"})
    assert found.erased == {"v1", "v2"} and not found.rederive


def test_a_memory_stated_in_an_erased_session_without_turns_goes() -> None:
    nodes = [node("stated", session="gone"), node("manual", session=None)]
    assert cascade(nodes, (), sessions={"gone"}).erased == {"stated"}


def test_an_update_that_goes_with_nothing_in_its_place_makes_the_old_version_valid_again(
) -> None:  # fmt: skip
    nodes = [node("root", by="update", session=None), node("update", "t9")]
    found = cascade(nodes, {"t9"})
    assert found.erased == {"update"} and reopened(nodes, found) == ["root"]
