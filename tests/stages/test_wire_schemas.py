"""What the endpoints are sent: every stage's reply schema stays small enough for a grammar
engine (issue 11, finding 10: `maxLength: 20000` crashed llama.cpp's grammar compiler)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from stratamem.eval.qa import Judgement
from stratamem.layers.schemas import (
    MAX_CONTENT_CHARS,
    ExtractedMemory,
    Extraction,
    ProfileDoc,
    Reconciliation,
    SceneOps,
)
from stratamem.llm.wire import compact_schema, schema_format
from stratamem.offload.l1_summaries import SummaryReply
from stratamem.offload.l2_diagram import DiagramReply
from stratamem.offload.l15_judgment import JudgmentReply
from stratamem.stages.envelope import StrictReply

STAGE_SCHEMAS: list[type[BaseModel]] = [
    Extraction, Reconciliation, SceneOps, ProfileDoc,
    SummaryReply, JudgmentReply, DiagramReply, Judgement,
]  # fmt: skip
MAX_WIRE_CHARS = 2500
HEAVY = {"maxLength", "minLength", "maxItems", "minItems", "pattern", "$ref", "$defs"}
LARGEST_BOUND = 100


def keywords(node: Any) -> list[tuple[str, Any]]:
    """Every (keyword, value) of a schema, property names excluded."""
    if isinstance(node, list):
        return [pair for value in node for pair in keywords(value)]
    if not isinstance(node, dict):
        return []
    found: list[tuple[str, Any]] = []
    for key, value in node.items():
        if key == "properties":
            found += [pair for sub in value.values() for pair in keywords(sub)]
        else:
            found += [(key, value), *keywords(value)]
    return found


def test_every_reply_envelope_is_listed_here() -> None:
    ours = {s for s in StrictReply.__subclasses__() if s.__module__.startswith("stratamem.")}
    assert ours <= set(STAGE_SCHEMAS)


@pytest.mark.parametrize("schema", STAGE_SCHEMAS, ids=lambda s: s.__name__)
def test_the_wire_schema_is_small_with_no_bound_a_grammar_must_expand(
    schema: type[BaseModel],
) -> None:
    wire = schema_format(schema)["json_schema"]["schema"]
    assert wire == compact_schema(schema)
    assert len(json.dumps(wire)) <= MAX_WIRE_CHARS
    used = keywords(wire)
    assert not HEAVY & {key for key, _ in used}
    bounds = [v for k, v in used if k in ("maximum", "minimum") and isinstance(v, int | float)]
    assert all(abs(v) <= LARGEST_BOUND for v in bounds)


def test_bounds_left_out_of_the_wire_are_still_checked_by_our_validation() -> None:
    too_long = {"type": "persona", "content": "x " * MAX_CONTENT_CHARS,
                "source_turn_ids": ["T1"]}  # fmt: skip
    with pytest.raises(ValueError, match="at most"):
        ExtractedMemory.model_validate(too_long)


def test_the_wire_schema_is_worked_out_once_and_each_caller_gets_its_own_copy() -> None:
    first = compact_schema(Extraction)
    first["properties"].clear()
    assert compact_schema(Extraction) == schema_format(Extraction)["json_schema"]["schema"]
    assert compact_schema(Extraction)["properties"]  # the change to the first copy did not stick
