"""The service's JSON answers as the library's records (the same types `AsyncMemory` returns)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from stratamem.domain import Hit, MemoryRecord, Profile, Recall, Scene
from stratamem.errors import StratamemError
from stratamem.offload.results import DiagramsView
from stratamem.store.offload.records import Diagram

T = TypeVar("T")
_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


class UnexpectedAnswer(StratamemError):
    """The service answered with JSON that is not the record it documents."""


def parse(kind: type[T], data: Any) -> T:
    """`data` validated as `kind` (a record dataclass), or `UnexpectedAnswer`."""
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    try:
        found: T = adapter.validate_python(data)
    except ValidationError as exc:
        raise UnexpectedAnswer(f"not a {kind.__name__}: {exc}") from exc
    return found


def parse_list(kind: type[T], data: Any) -> list[T]:
    if not isinstance(data, list):
        raise UnexpectedAnswer(f"expected a list of {kind.__name__}, got {type(data).__name__}")
    return [parse(kind, item) for item in data]


def field(data: Any, key: str) -> Any:
    """`data[key]` of a JSON object, or `UnexpectedAnswer`."""
    if not isinstance(data, Mapping) or key not in data:
        raise UnexpectedAnswer(f"expected an object with {key!r}, got {str(data)[:200]}")
    return data[key]


def hits(data: Any) -> list[Hit]:
    found = parse_list(dict, field(data, "hits"))
    return [parse(Hit, {**h, "memory_type": h.get("type")}) for h in found]


def recall(data: Any) -> Recall:
    return Recall(
        hits=hits(data),
        context=str(field(data, "context")),
        stable=str(field(data, "stable")),
        stats=dict(field(data, "stats")),
    )


def memory(data: Any, tenant: str) -> MemoryRecord:
    return parse(MemoryRecord, {**parse(dict, data), "tenant": tenant})


def memories(data: Any, tenant: str) -> list[MemoryRecord]:
    return [memory(m, tenant) for m in parse_list(dict, data)]


def scenes(data: Any, tenant: str) -> list[Scene]:
    return [parse(Scene, {**s, "tenant": tenant}) for s in parse_list(dict, data)]


def profiles(data: Any, tenant: str) -> list[Profile]:
    return [parse(Profile, {**p, "tenant": tenant}) for p in parse_list(dict, data)]


def diagrams(data: Any) -> DiagramsView:
    note = field(data, "note")
    found = parse_list(Diagram, field(data, "diagrams"))
    return DiagramsView(found, None if note is None else str(note))
