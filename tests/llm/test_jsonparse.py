"""Reading model replies as JSON: one value and nothing else, or a typed error."""

from __future__ import annotations

from typing import Any

import pytest

from stratamem.llm import NoJSONFound, extract_json
from stratamem.llm.jsonparse import JSONAmongText


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  \n[1, 2]\n", [1, 2]),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```JSON {"a": 1}```', {"a": 1}),
        ('\n ```\n[{"a": 1}]\n```  \n', [{"a": 1}]),
        (
            '{"text": "a } brace, a \\" quote and ``` a fence"}',
            {"text": 'a } brace, a " quote and ``` a fence'},
        ),
        ('\ufeff{"a": 1}', {"a": 1}),
        ("42", 42),
    ],
)
def test_one_value_or_one_fence_around_it_is_read(text: str, expected: Any) -> None:
    assert extract_json(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        'Sure. {"a": {"b": [1, 2]}} That is all.',
        'Here you go:\n```json\n{"a": "b"}\n```\nAnything else?',
        '{"memories": []} I hope this helps',
        '{"a": 1}\n{"a": 2}',
        '```json\n{"a": 1}\n```\n```json\n{"a": 2}\n```',
        '{broken {"a": 1}',
        "The user said [1, 2] and more",
    ],
)
def test_json_among_text_is_a_typed_error_never_an_inner_value(text: str) -> None:
    with pytest.raises(JSONAmongText, match="one JSON value and nothing else"):
        extract_json(text)


@pytest.mark.parametrize("text", ["", "   ", "no json here", "{unclosed", "[1, 2", "```json\n```"])
def test_no_json(text: str) -> None:
    with pytest.raises(NoJSONFound) as raised:
        extract_json(text)
    assert not isinstance(raised.value, JSONAmongText)
