"""Strict reply envelopes: exactly the expected top-level object, its items checked one by one.

The LLM client validates a reply against its envelope: every field is required (an empty list
must be written out, never stand in for a missing field) and an unknown top-level key is an
error, so a reply that names the wrong key, or an inner object found in prose, is never read as
"nothing to do". The items of a list field are any JSON values at that point: the stage checks
them one by one (types, bounds, ids against the ids its prompt showed, minimum content), so one
bad item is dropped, not the batch.

The JSON schema sent to the endpoint still describes the items, compactly
(`llm.wire.compact_schema`: references inlined, no length bounds a grammar engine would expand
into that many rules; our own checks enforce the bounds).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from stratamem.llm.wire import compact_schema


class StrictReply(BaseModel):
    """The envelope of a stage's reply: its fields, each required, and no others."""

    model_config = ConfigDict(extra="forbid")


def array_of(item: type[BaseModel]) -> WithJsonSchema:
    """The JSON schema of a list of `item`s, for `Annotated[list[Any], array_of(Item)]`."""
    return WithJsonSchema({"type": "array", "items": compact_schema(item)})
