"""The OpenAI chat-completions wire format: request bodies and reply parsing."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

Messages = Sequence[Mapping[str, Any]]

_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")
"""Characters OpenAI refuses in a response format's schema name."""

STAGE_HEADER = "x-stratamem-stage"
"""A header naming the stage of each call, for gateways' logs and the scripted test server."""


def estimate_tokens(chars: int) -> int:
    """A token estimate where an endpoint reports none: one token per four characters."""
    return math.ceil(chars / 4)


SCHEMA_HINT = (
    "Reply with one JSON value only, no prose and no code fences, that validates against this "
    "JSON schema:\n{schema}"
)
REPAIR_PROMPT = (
    "Your previous reply could not be used: {error}\n"
    "Reply again with only the corrected JSON, nothing else."
)


class _Message(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)


class ChatReply(BaseModel):
    """The part of a chat completion that stratamem reads."""

    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None

    @property
    def content(self) -> str:
        return self.choices[0].message.content or ""


_GRAMMAR_HEAVY = frozenset({"maxLength", "minLength", "maxItems", "minItems", "pattern", "title"})
"""Keywords left out of schemas sent to endpoints. A grammar engine compiles the schema into
rules, and a large length bound expands into that many (llama.cpp's compiler crashed on
`maxLength: 20000`, issue 11 finding 10); the bounds are checked by our own validation of the
reply. Titles only add bytes."""


def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema as sent to an endpoint: `$defs` inlined, no length or item bounds,
    no patterns, no titles. A new copy each time (the caller may change it) of what was worked
    out once per model."""
    compact: dict[str, Any] = json.loads(_compact_schema_text(model))
    return compact


@functools.lru_cache(maxsize=256)
def _compact_schema_text(model: type[BaseModel]) -> str:
    """Pydantic builds a model's schema anew at each `model_json_schema` call: at every LLM
    call, 10 % of an L1 worker's CPU (py-spy, bench/drain.py). The reply models are classes
    defined once, so the schema is kept per class."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return json.dumps(_compact(schema, defs))


def _compact(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_compact(value, defs) for value in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _compact(defs[str(node["$ref"]).rsplit("/", 1)[-1]], defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _compact(sub, defs) for name, sub in value.items()}
        elif key not in _GRAMMAR_HEAVY:
            out[key] = _compact(value, defs)
    return out


def schema_name(schema: type[BaseModel]) -> str:
    return _SCHEMA_NAME.sub("_", schema.__name__)[:64] or "reply"


def schema_format(schema: type[BaseModel]) -> dict[str, Any]:
    """OpenAI's `response_format` asking for JSON that validates against `schema`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema_name(schema),
            "schema": compact_schema(schema),
            "strict": False,
        },
    }


def with_schema_hint(messages: Messages, hint: str) -> list[dict[str, Any]]:
    """`messages` with `hint` appended to the first system message (or a new one in front).

    Some chat templates accept one system message only, so the hint joins the existing one.
    """
    out = [dict(m) for m in messages]
    for message in out:
        if message.get("role") == "system":
            message["content"] = f"{message.get('content') or ''}\n\n{hint}".strip()
            return out
    return [{"role": "system", "content": hint}, *out]


def repair_messages(messages: Messages, raw: str, error: str) -> list[dict[str, Any]]:
    """The conversation for the repair round: the bad reply, then what was wrong with it."""
    return [
        *(dict(m) for m in messages),
        {"role": "assistant", "content": raw},
        {"role": "user", "content": REPAIR_PROMPT.format(error=error)},
    ]


def prompt_chars(messages: Messages) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)
