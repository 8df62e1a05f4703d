"""How real servers treat the structured-output fields of a chat request, for `ScriptedLLM`.

A request asks for JSON in one of these forms (`form_of`): `openai` (`response_format` of type
`json_schema`), `llamacpp` (`response_format` of type `json_object` with a `schema`),
`json_object` (the same without a schema), `ollama` (a top-level `format`). A server takes some
forms and treats the others its own way, which `Endpoint` describes:

- `Endpoint.openai()`: takes every `response_format` form, ignores `format` (OpenAI, vLLM);
- `Endpoint.llamacpp()`: llama-cpp-python's server: answers the `openai` form with HTTP 500
  (its validation error, as recorded in the real-reply corpus), takes `json_object` with or
  without a schema, ignores `format`;
- `Endpoint.ollama()`: takes `format`, and ignores a `response_format` it does not take
  without any error (the model then answers as it likes; script that with a handler that looks
  at `RecordedRequest.form`);
- `Endpoint.plain()`: takes no form, refuses any `response_format` with HTTP 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stratamem.testing.replies import Reply, form_of

__all__ = ["Endpoint", "form_of"]
LLAMACPP_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'),"
    " 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Forms a server takes (`takes`); the others get `refusals[form]`, or are ignored."""

    name: str
    takes: frozenset[str]
    refusals: Mapping[str, Reply]

    def answer_to(self, form: str | None) -> Reply | None:
        """The refusal of `form`, or None when the request goes on to the scripted reply."""
        if form is None or form in self.takes:
            return None
        return self.refusals.get(form)

    @classmethod
    def openai(cls) -> Endpoint:
        return cls("openai", frozenset({"openai", "llamacpp", "json_object"}), {})

    @classmethod
    def llamacpp(cls) -> Endpoint:
        refusal = Reply.error(500, LLAMACPP_REFUSAL)
        return cls("llamacpp", frozenset({"llamacpp", "json_object"}), {"openai": refusal})

    @classmethod
    def ollama(cls) -> Endpoint:
        return cls("ollama", frozenset({"ollama"}), {})

    @classmethod
    def plain(cls) -> Endpoint:
        refusal = Reply.unsupported_response_format()
        refusals = {form: refusal for form in ("openai", "llamacpp", "json_object")}
        return cls("plain", frozenset(), refusals)
