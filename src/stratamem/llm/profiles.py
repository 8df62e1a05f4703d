"""Endpoint profiles: how an endpoint takes a request for JSON that follows a schema.

- `openai`: `response_format: {"type": "json_schema", "json_schema": {name, schema}}` (OpenAI,
  vLLM, Ollama since 0.5, llama.cpp's own `llama-server`);
- `llamacpp`: `response_format: {"type": "json_object", "schema": …}` (llama-cpp-python's
  server, which answers the `openai` form with HTTP 500);
- `ollama`: the schema as a top-level `format` field (Ollama's native field);
- `prompt`: no format field; the schema goes into the system prompt.

Every profile also relies on our own validation: the wire schema is compact
(`wire.compact_schema`) and the reply is checked whatever the endpoint enforced.

With `structured=auto` the client starts with `openai` and moves on to `llamacpp`, then
`prompt`, each time an endpoint refuses the form it was sent (HTTP 400, 422 or 500 whose body
names the field or the schema). What it learned is kept per endpoint and model in the client
(so for the life of the process); a configured profile is never changed, and its refusal is an
error naming the setting.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from pydantic import BaseModel

from stratamem.llm import wire

Profile = Literal["openai", "llamacpp", "ollama", "prompt"]
PROFILES: tuple[Profile, ...] = ("openai", "llamacpp", "ollama", "prompt")
AUTO_ORDER: tuple[Profile, ...] = ("openai", "llamacpp", "prompt")
REFUSAL_STATUS = frozenset({400, 422, 500})
_NAMED: dict[Profile, tuple[str, ...]] = {
    "openai": ("response_format", "json_schema"),
    "llamacpp": ("response_format", "json_object", "schema", "grammar"),
    "ollama": ("format", "schema"),
    "prompt": (),
}


def format_fields(profile: Profile, schema: type[BaseModel]) -> dict[str, Any]:
    """The request fields that ask `profile`'s way for JSON following `schema`."""
    if profile == "openai":
        return {"response_format": wire.schema_format(schema)}
    if profile == "llamacpp":
        return {"response_format": {"type": "json_object", "schema": wire.compact_schema(schema)}}
    if profile == "ollama":
        return {"format": wire.compact_schema(schema)}
    return {}


def refuses(profile: Profile, status: int, body: str) -> bool:
    """Whether an error answer says the endpoint does not take `profile`'s format."""
    if status not in REFUSAL_STATUS:
        return False
    lowered = body.lower()
    return any(word in lowered for word in _NAMED[profile])


class ProfileMemory:
    """The profile in use per (endpoint, model): configured, or learned from refusals."""

    def __init__(self, configured: Literal["auto"] | Profile) -> None:
        self.configured = configured
        self._learned: dict[tuple[str, str], Profile] = {}
        self._lock = threading.Lock()

    @property
    def auto(self) -> bool:
        return self.configured == "auto"

    def current(self, base_url: str, model: str) -> Profile:
        if self.configured != "auto":
            return self.configured
        with self._lock:
            return self._learned.get((base_url, model), AUTO_ORDER[0])

    def refused(self, base_url: str, model: str, profile: Profile) -> Profile | None:
        """After a refusal of `profile`: the next one to try (remembered), or None when the
        profile was configured (not ours to change) or nothing is left."""
        if self.configured != "auto" or profile not in AUTO_ORDER:
            return None
        position = AUTO_ORDER.index(profile)
        if position + 1 >= len(AUTO_ORDER):
            return None
        following = AUTO_ORDER[position + 1]
        with self._lock:
            self._learned[(base_url, model)] = following
        return following
