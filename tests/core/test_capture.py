"""Capture: verbatim storage, stable ids, stripping of injected blocks, all-or-nothing input."""

from __future__ import annotations

import json

import pytest

from stratamem.capture import strip_injected
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import InvalidIdentifier, InvalidInput


async def turn_count(memory: AsyncMemory, tenant: str = "acme") -> int:
    return int((await memory.stats(tenant))["L0"]["records"])


async def test_same_message_captured_twice_is_stored_once(memory: AsyncMemory) -> None:
    messages = [{"role": "user", "content": "I moved to Lisbon"}]
    first = await memory.capture("acme", "s1", messages)
    second = await memory.capture("acme", "s1", messages)
    assert first.ids == second.ids
    assert (first.stored, second.duplicates) == (first.ids, first.ids)
    assert await turn_count(memory) == 1


async def test_caller_ids_and_timestamps_make_repeats_distinct(memory: AsyncMemory) -> None:
    await memory.capture("acme", "s1", [{"role": "user", "content": "ok", "id": "a"}])
    await memory.capture("acme", "s1", [{"role": "user", "content": "ok", "id": "b"}])
    await memory.capture("acme", "s1", [{"role": "user", "content": "ok", "timestamp": 5}])
    assert await turn_count(memory) == 3


async def test_repeats_within_one_call_are_kept(memory: AsyncMemory) -> None:
    result = await memory.capture(
        "acme", "s1", [{"role": "user", "content": "yes"}, {"role": "user", "content": "yes"}]
    )
    assert len(set(result.stored)) == 2


async def test_text_is_stored_verbatim_with_speaker_and_time(memory: AsyncMemory) -> None:
    text = "  Tabs\tand  spaces  stay, ünïcödé too  "
    result = await memory.capture(
        "acme",
        "s1",
        [{"role": "assistant", "content": text, "name": "Bot", "timestamp": "2024-05-01T10:00:00"}],
    )
    stored = memory.store.get_turns(Scope("acme"), result.ids)[0]
    assert stored.text == text.strip()
    assert stored.speaker == "Bot"
    assert stored.timestamp == 1714557600.0


async def test_injected_recall_blocks_are_never_captured(memory: AsyncMemory) -> None:
    recall = await memory.recall("acme", "anything")
    polluted = f"{recall.context}\n<stratamem-recall>\n- [persona] likes tea\n</stratamem-recall>"
    result = await memory.capture(
        "acme",
        "s1",
        [
            {"role": "user", "content": "What should I drink?" + polluted},
            {"role": "system", "content": "<stratamem-profile>User profile</stratamem-profile>"},
        ],
    )
    turns = memory.store.get_turns(Scope("acme"), result.ids)
    assert [t.text for t in turns] == ["What should I drink?"]
    assert result.skipped_empty == 1


def test_strip_handles_case_attributes_and_unterminated_blocks() -> None:
    assert strip_injected("a <STRATAMEM-RECALL v='1'>x</stratamem-recall> b") == "a  b"
    assert strip_injected("keep <stratamem-context>cut to the end") == "keep"
    assert strip_injected("<b>not ours</b>") == "<b>not ours</b>"


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"role": "user", "content": "   "}, "empty"),
        ({"role": "user", "content": "x" * 1001}, "limit"),
        ({"role": "wizard", "content": "hi"}, "unknown role"),
        ({"role": "user", "content": 42}, "must be a string"),
        ({"role": "user", "content": "hi", "timestamp": "yesterday-ish"}, "timestamp"),
        ({"role": "user", "content": "hi", "metadata": [1]}, "metadata"),
        ({"role": "user", "content": "hi", "metadata": {"x": object()}}, "not JSON"),
        ({"role": "user", "content": "hi", "metadata": {"x": "y" * 20_000}}, "metadata"),
        ({"role": "user", "content": "hi", "timestamp": float("nan")}, "accepted range"),
        ({"role": "user", "content": "hi", "timestamp": 1e15}, "accepted range"),
        ({"role": "user", "content": "hi", "timestamp": "9999-12-31T23:59:59-01:00"}, "range"),
        ({"role": "user", "content": "a\ud800"}, "surrogate"),
        ({"role": "user", "content": "hi", "metadata": {"\udfff": 1}}, "surrogate"),
        ({"role": "user", "content": "hi", "speaker": "\ud800"}, "surrogate"),
        ({"role": "user", "content": "hi", "metadata": {"x": json.loads("[" * 40 + "]" * 40)}},
         "nested"),
    ],
)
async def test_bad_message_stores_nothing_of_the_call(
    memory: AsyncMemory, message: dict[str, object], error: str
) -> None:
    good = {"role": "user", "content": "a fine message"}
    with pytest.raises(InvalidInput, match=error):
        await memory.capture("acme", "s1", [good, message, good])
    assert await turn_count(memory) == 0


@pytest.mark.parametrize("tenant", ["", "../etc", "a b", "x" * 200, "-lead"])
async def test_bad_tenant_is_refused(memory: AsyncMemory, tenant: str) -> None:
    with pytest.raises(InvalidIdentifier):
        await memory.capture(tenant, "s1", [{"role": "user", "content": "hi"}])


async def test_no_messages_is_an_error(memory: AsyncMemory) -> None:
    with pytest.raises(InvalidInput):
        await memory.capture("acme", "s1", [])


async def test_captured_turn_is_searchable_at_once_without_embeddings(
    memory: AsyncMemory,
) -> None:
    await memory.capture("acme", "s1", [{"role": "user", "content": "my cat is called Miso"}])
    hits = await memory.search("acme", "what is the cat called")
    assert [h.text for h in hits] == ["my cat is called Miso"]
