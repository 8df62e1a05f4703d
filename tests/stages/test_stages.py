"""What the LLM stages share: the minimum-content rule, compact strict envelopes, the repair
round of a reply whose items all fail, and bisection's order and bounds."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from stratamem.layers.schemas import Extraction, ProfileDoc, SceneOps
from stratamem.llm import LLMClient, LLMOutputInvalid, LLMSettings
from stratamem.stages.bisect import attempts_to_first, bisect
from stratamem.stages.checked import RepliesRejected, ask_checked, check_items, require_some
from stratamem.stages.content import content_problem, word_units
from stratamem.stages.envelope import StrictReply, array_of
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM


@pytest.mark.parametrize(
    ("text", "passes"),
    [
        ("", False), ("...", False), ("Paris!", False), ("2023 01 20", False), ("巴黎", False),
        ("🙂 🙂", False), ("Jon dances", True), ("Maria is vegetarian.", True),
        ("玛丽吃素", True), ("マリアはベジタリアン", True), ("Мария вегетарианка", True),
        ("मारिया शाकाहारी है", True), ("ماريا نباتية", True), ("마리아는 채식주의자", True),
    ],
)  # fmt: skip
def test_the_minimum_content_rule_is_about_words_in_any_script(text: str, passes: bool) -> None:
    assert (content_problem(text, 2, "memory") is None) is passes


def test_word_units_count_unspaced_scripts_by_half_characters() -> None:
    assert word_units("Marietta-Creek USA (2018)") == 4
    assert word_units("玛丽吃素") == 2 and word_units("Maria 吃素") == 2
    assert content_problem("Paris!", 2, "content") == (
        "content 'Paris!' says too little (at least 2 words)"
    )


class Item(BaseModel):
    name: str = Field(max_length=20_000)
    tags: list[str] = Field(max_length=500)


class Envelope(StrictReply):
    items: Annotated[list[Any], array_of(Item)]


def test_an_envelope_is_exactly_its_keys_and_its_schema_stays_small() -> None:
    for reply in ({}, {"item": []}, {"items": [], "extra": 1}, {"items": "none"}):
        with pytest.raises(ValidationError):
            Envelope.model_validate(reply)
    assert Envelope.model_validate({"items": [1, {"x": 2}]}).items == [1, {"x": 2}]
    for schema in (Extraction, SceneOps, ProfileDoc, Envelope):
        text = json.dumps(schema.model_json_schema())
        assert "maxLength" not in text and "maxItems" not in text and "$ref" not in text
    items = Envelope.model_json_schema()["properties"]["items"]["items"]
    assert items["required"] == ["name", "tags"] and "name" in items["properties"]
    assert SceneOps.model_json_schema()["properties"]["operations"]["items"]["properties"][
        "title"
    ]  # a property named like a schema keyword survives


def test_items_are_checked_one_by_one() -> None:
    checked = check_items([{"name": "a", "tags": []}, {"name": 3}, "x"], Item.model_validate)
    assert [i.name for i in checked.kept] == ["a"]
    assert [(d.index, d.item) for d in checked.dropped] == [(1, {"name": 3}), (2, "x")]
    assert "tags: Field required" in checked.dropped[0].reason
    with pytest.raises(ValueError, match="every item of the reply was invalid: item 1: name"):
        require_some(check_items([{"name": 3}], Item.model_validate), "item")
    assert require_some(check_items([], Item.model_validate), "item").kept == []


async def test_a_reply_whose_items_all_fail_is_repaired_once(scripted_llm: ScriptedLLM) -> None:
    settings = LLMSettings(base_url=scripted_llm.base_url, model="m", max_attempts=1)
    bad, good = {"items": [{"name": 3}]}, {"items": [{"name": "ok", "tags": []}]}
    scripted_llm.push(Reply.json(bad), Reply.json(good), Reply.json(bad), Reply.json(bad))

    def read(reply: Envelope) -> list[Item]:
        return require_some(check_items(reply.items, Item.model_validate), "item").kept

    async with LLMClient(settings, sleep=RecordingSleep()) as llm:
        messages = [{"role": "user", "content": "items please"}]
        answer = await ask_checked(llm, "stage", messages, Envelope, read)
        assert [i.name for i in answer.value] == ["ok"] and answer.repaired
        repair = scripted_llm.requests[1].body["messages"]
        assert json.loads(repair[-2]["content"]) == bad
        assert "every item of the reply was invalid" in repair[-1]["content"]
        with pytest.raises(RepliesRejected) as failed:
            await ask_checked(llm, "stage", messages, Envelope, read)
    assert isinstance(failed.value, LLMOutputInvalid)
    assert [json.loads(r) for r in failed.value.raws] == [bad, bad]


async def test_bisection_settles_a_prefix_and_stops_at_its_budget() -> None:
    tried: list[tuple[int, ...]] = []

    async def attempt(segment: tuple[int, ...]) -> int:
        tried.append(segment)
        if 3 in segment:
            raise LLMOutputInvalid("unusable", raw="x")
        return len(segment)

    done = await bisect([list(range(8))], attempt, max_attempts=100)
    assert tried == [(0, 1, 2, 3, 4, 5, 6, 7), (0, 1, 2, 3), (0, 1), (2, 3), (2,), (3,),
                     (4, 5, 6, 7)]  # fmt: skip
    assert [s.items for s in done.failed] == [(3,)] and done.count == 8
    assert done.attempts == 1 + 2 * 3  # 1 + 2 ceil(log2 8)

    tried.clear()
    short = await bisect([list(range(8))], attempt, max_attempts=1)
    assert short.attempts == attempts_to_first(8) == 4 and short.count == 2  # (0, 1) settled
    assert (await bisect([[]], attempt, 5)).count == 0
