"""A reply checked beyond its envelope, with one repair round, and items checked one by one.

`ask_checked` asks the LLM for a reply (the client validates its envelope and repairs that once
itself), then runs the stage's `read` on it. `read` returns what the stage takes from the reply,
or raises `Unusable` with the reason: the reply then gets one repair round (the reason goes back
to the model); a second failure raises `RepliesRejected` with both replies. So one extraction
costs at most four calls: two replies, each possibly repaired once by the client.

`check_items` checks a reply's items one by one: an invalid item is dropped with its reason; a
reply whose items are all invalid is unusable (`require_some`; `require_kept` where a reply
must keep at least one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from stratamem.llm.base import LLM
from stratamem.llm.errors import LLMOutputInvalid
from stratamem.llm.wire import Messages, repair_messages

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")
T = TypeVar("T")
_REASONS_SHOWN = 8
_ERROR_CHARS = 2000


class Unusable(ValueError):
    """A reply (or one item of it) that passed its envelope but cannot be used; the message
    says why, for the repair round and the failure record."""


class RepliesRejected(LLMOutputInvalid):
    """A reply failed the stage's own checks, and so did the reply to its repair round."""


@dataclass(frozen=True, slots=True)
class Answer(Generic[R]):
    """What the stage read from an accepted reply; `raws` are the replies it took (as JSON),
    the accepted one last."""

    value: R
    raws: tuple[str, ...]

    @property
    def repaired(self) -> bool:
        return len(self.raws) > 1


async def ask_checked(
    llm: LLM,
    stage: str,
    messages: Messages,
    schema: type[M],
    read: Callable[[M], R],
    *,
    max_tokens: int | None = None,
) -> Answer[R]:
    """The reply as `schema`, read by `read`; one repair round when `read` finds it unusable.

    Raises `RepliesRejected` (an `LLMOutputInvalid`) with every reply when the repair fails too;
    other `LLMError`s (transport, HTTP, an unusable envelope) propagate as the client raised them.
    """
    with llm.usage.stage_call(stage):  # one outcome for the call, repairs included
        return await _ask(llm, stage, messages, schema, read, max_tokens)


async def _ask(
    llm: LLM,
    stage: str,
    messages: Messages,
    schema: type[M],
    read: Callable[[M], R],
    max_tokens: int | None,
) -> Answer[R]:
    first = await llm.complete_json(stage, messages, schema, max_tokens=max_tokens)
    raw_first = first.model_dump_json()
    try:
        return Answer(read(first), (raw_first,))
    except Unusable as problem:
        retry = repair_messages(messages, raw_first, str(problem)[:_ERROR_CHARS])
    llm.usage.note_repair()
    try:
        second = await llm.complete_json(stage, retry, schema, max_tokens=max_tokens)
    except LLMOutputInvalid as exc:
        raise RepliesRejected(
            f"stage {stage}: the repair round failed: {exc}"[:_ERROR_CHARS],
            raw=exc.raw,
            raws=(raw_first, *exc.raws),
        ) from exc
    raw_second = second.model_dump_json()
    try:
        return Answer(read(second), (raw_first, raw_second))
    except Unusable as again:
        raise RepliesRejected(
            f"stage {stage}: the reply failed its checks after a repair round: {again}"[
                :_ERROR_CHARS
            ],
            raw=raw_second,
            raws=(raw_first, raw_second),
        ) from again


@dataclass(frozen=True, slots=True)
class Dropped:
    """An item of a reply that failed its checks: its position, the item as sent, the reason."""

    index: int
    item: Any
    reason: str


@dataclass(frozen=True, slots=True)
class Items(Generic[T]):
    kept: list[T]
    dropped: list[Dropped]


def check_items(items: Sequence[Any], check: Callable[[Any], T]) -> Items[T]:
    """Each item through `check` (which raises `ValidationError` or `Unusable`), in order."""
    kept: list[T] = []
    dropped: list[Dropped] = []
    for index, item in enumerate(items):
        try:
            kept.append(check(item))
        except ValidationError as exc:
            dropped.append(Dropped(index, item, validation_reason(exc)))
        except Unusable as exc:
            dropped.append(Dropped(index, item, str(exc)))
    return Items(kept, dropped)


def require_some(items: Items[T], what: str) -> Items[T]:
    """`items`, unless every one of them was dropped (`Unusable`, with the reasons)."""
    if items.dropped and not items.kept:
        reasons = "; ".join(f"{what} {d.index + 1}: {d.reason}" for d in
                            items.dropped[:_REASONS_SHOWN])  # fmt: skip
        raise Unusable(f"every {what} of the reply was invalid: {reasons}")
    return items


def require_kept(items: Items[T], problem: str, hint: str) -> Items[T]:
    """`items`, unless none was kept (none given, or every one dropped): `Unusable` saying
    `problem`, why each was dropped, and `hint` (what to do instead)."""
    if not items.kept:
        reasons = "; ".join(d.reason for d in items.dropped[:_REASONS_SHOWN]) or "none given"
        raise Unusable(f"{problem} ({reasons}); {hint}")
    return items


def validation_reason(exc: ValidationError) -> str:
    """A pydantic error in one line: `field: message; …`."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ())) or "item"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)
