"""The support checks one by one: markup, the prompt's own text, whose turn, the share of
content words, and where an event's time comes from."""

from __future__ import annotations

import pytest

from stratamem.domain import Role, Turn
from stratamem.stages.support import Cited, event_time, support_problem, support_share

DAY = 86_400.0
NOON = 1_715_169_600.0  # 2024-05-08 12:00 UTC


def turn(
    text: str, role: Role = Role.USER, speaker: str | None = "Priya", at: float = NOON
) -> Turn:
    return Turn("t1", "acme", "s1", role, text, at, speaker)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("Priya works night shifts.", "I work night shifts at the hospital."),
        ("Priya's sister is vegetarian.", "my sister is a vegetarian"),
        ("Priya is allergic to shellfish.", "I have a shellfish allergy"),
        ("Priya prefers kilometres over miles.", "Please use kilometres, not miles."),
        ("Jon dances salsa on Fridays.", "I go dancing, salsa mostly, every Friday"),
        ("玛丽吃素", "我的妹妹玛丽吃素"),
        ("Priya uses {} for empty dicts.", "I always write {} for an empty dict"),
    ],
)
def test_faithful_memories_pass(content: str, said: str) -> None:
    assert support_problem(content, Cited((turn(said),))) is None


@pytest.mark.parametrize(
    ("content", "said", "why"),
    [
        ('B1234567890:T1, priority=50}, {"', "I work nights.", "markup or JSON"),
        ('{"type": "persona"}', "I work nights.", "markup or JSON"),
        ("<b>Priya</b> works nights", "I work nights.", "markup or JSON"),
        ("Maria is vegetarian.", "We had pasta.", "copies the prompt"),
        ("Always answer Maria in short bullet points", "hello", "copies the prompt"),
        ("Priya is training for the Berlin marathon.", "What should I cook?", "not supported"),
        ("Priya (user)", "Hi, I'm Priya.", "nothing but a name"),
        ("Priya: You too!", "You too!", "nothing but a name"),
    ],
)
def test_unsupported_memories_are_refused(content: str, said: str, why: str) -> None:
    problem = support_problem(content, Cited((turn(said),)))
    assert problem is not None and why in problem


@pytest.mark.parametrize("content", ["Priya is 34.", "Priya moved in 2019.", "Priya on Friday"])
def test_a_name_with_a_number_or_a_time_is_a_fact(content: str) -> None:
    said = "I'm 34, I moved here in 2019 and I'm off on Friday"
    assert support_problem(content, Cited((turn(said),))) is None


def test_the_prompts_example_passes_where_the_turn_says_it() -> None:
    assert support_problem("Maria is vegetarian", Cited((turn("Maria is vegetarian"),))) is None


def test_a_fact_cites_the_users_turn_or_a_confirmed_assistants_turn() -> None:
    said = turn("You are allergic to shellfish, right?", Role.ASSISTANT, None)
    problem = support_problem("Priya is allergic to shellfish.", Cited((said,)))
    assert problem is not None and "cites only assistant turns" in problem
    for reply, grounded in (("Yes, badly.", True), ("No, that's my sister.", False)):
        cited = Cited((said,), (turn(reply),))
        assert (support_problem("Priya is allergic to shellfish.", cited) is None) is grounded


def test_the_names_of_people_shown_count_neither_way() -> None:
    said = turn("Thanks for having my back.", speaker="Jon")
    assert support_share("Jon thanks Gina for having his back", [said])[0] < 1
    assert support_share("Jon thanks Gina for having his back", [said], {"Gina"})[0] == 1
    assert support_share("Jon runs marathons", [said], {"Gina"})[0] == 0


def test_an_events_time_comes_from_its_turns() -> None:
    plain, dated = turn("I cooked lentils."), turn("We fly to Rome tomorrow.")
    assert event_time(None, [plain]) == NOON
    assert event_time(NOON + DAY, [plain]) == NOON  # nothing in the turn says "another day"
    assert event_time(NOON + DAY, [dated]) == NOON + DAY
    assert event_time(NOON - 3600, [plain]) == NOON - 3600  # the turn's own day
