"""Finding the JSON in model replies."""

from __future__ import annotations

from typing import Any

import pytest

from stratamem.llm import NoJSONFound, extract_json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  \n[1, 2]\n", [1, 2]),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('```JSON {"a": 1}```', {"a": 1}),
        ('```\n[{"a": 1}]\n```', [{"a": 1}]),
        ('Here you go:\n```json\n{"a": "b"}\n```\nAnything else?', {"a": "b"}),
        ('Sure. {"a": {"b": [1, 2]}} That is all.', {"a": {"b": [1, 2]}}),
        ('The answer: {"text": "a } brace and a \\" quote"}', {"text": 'a } brace and a " quote'}),
        ('{broken {"a": 1}', {"a": 1}),
        ('\ufeff{"a": 1}', {"a": 1}),
        ("42", 42),
    ],
)
def test_extracts(text: str, expected: Any) -> None:
    assert extract_json(text) == expected


def test_fence_that_does_not_parse_falls_back_to_a_balanced_value() -> None:
    assert extract_json('```json\n{"a": \n```\nor rather {"a": 2}') == {"a": 2}


def test_prefer_object_skips_an_earlier_array() -> None:
    text = 'As noted in [1], the result is {"ok": true}'
    assert extract_json(text) == [1]
    assert extract_json(text, prefer_object=True) == {"ok": True}
    assert extract_json("only [1, 2] here", prefer_object=True) == [1, 2]


@pytest.mark.parametrize("text", ["", "   ", "no json here", "{unclosed", "[1, 2"])
def test_no_json(text: str) -> None:
    with pytest.raises(NoJSONFound):
        extract_json(text)
