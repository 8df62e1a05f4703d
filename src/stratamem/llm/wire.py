"""The OpenAI chat-completions wire format: request bodies and reply parsing."""

from __future__ import annotations

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


def schema_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The `response_format` asking for JSON that validates against `schema`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": _SCHEMA_NAME.sub("_", schema.__name__)[:64] or "reply",
            "schema": schema.model_json_schema(),
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


def rejects_response_format(status: int, text: str) -> bool:
    """Whether an error reply says the endpoint does not take the response format sent."""
    lowered = text.lower()
    return status == 400 and ("response_format" in lowered or "json_schema" in lowered)


def prompt_chars(messages: Messages) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)
