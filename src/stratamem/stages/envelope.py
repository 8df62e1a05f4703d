"""Strict reply envelopes: exactly the expected top-level object, its items checked one by one.

The LLM client validates a reply against its envelope: every field is required (an empty list
must be written out, never stand in for a missing field) and an unknown top-level key is an
error, so a reply that names the wrong key, or an inner object found in prose, is never read as
"nothing to do". The items of a list field are any JSON values at that point: the stage checks
them one by one (types, bounds, ids against the ids its prompt showed, minimum content), so one
bad item is dropped, not the batch.

The JSON schema sent to the endpoint still describes the items, compactly: references inlined,
no `maxLength` / `maxItems` (a grammar engine expands a large bound into that many rules; our
own checks enforce the bounds).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, WithJsonSchema

_UNBOUNDED = frozenset({"maxLength", "maxItems"})


class StrictReply(BaseModel):
    """The envelope of a stage's reply: its fields, each required, and no others."""

    model_config = ConfigDict(extra="forbid")


def array_of(item: type[BaseModel]) -> WithJsonSchema:
    """The JSON schema of a list of `item`s, for `Annotated[list[Any], array_of(Item)]`."""
    return WithJsonSchema({"type": "array", "items": compact_schema(item)})


def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema with its `$defs` inlined and no length bounds."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    compact: dict[str, Any] = _compact(schema, defs)
    return compact


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
        elif key not in _UNBOUNDED:
            out[key] = _compact(value, defs)
    return out
