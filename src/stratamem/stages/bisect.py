"""Batch bisection: a batch whose reply is unusable is split until the failing item is alone.

`bisect` settles items in order. It tries a segment; when the reply is unusable (truncated,
invalid after its repair round, all items invalid …: an `LLMOutputInvalid`) it splits the
segment in halves and tries the first half first; a single item whose attempt fails is settled
as failed (the caller quarantines it or falls back). Transport failures (endpoint down,
timeouts, HTTP errors, rate limits) are not the batch's fault: bisection stops there and
returns what it settled before, with the error in `interrupted`; the caller keeps that prefix
and raises the error (the task is retried from the first item not settled).

The settled items are always a prefix of the input, so a cursor can move to the last of them.
Calls stay bounded: at most `max_attempts` attempts per run (raised to the depth that settles
the first item, `attempts_to_first(n)`). One bad item among n costs at most
1 + 2 ceil(log2 n) attempts; a batch where every item fails needs 2n - 1 to settle whole, so a
run with a smaller budget settles a prefix and leaves the rest to the next run.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from stratamem.errors import LLMError
from stratamem.llm.errors import LLMOutputInvalid

I = TypeVar("I")  # noqa: E741 - the item type
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Settled(Generic[I, R]):
    """A segment whose attempt was accepted (`result`), or a single item that failed."""

    items: tuple[I, ...]
    result: R | None = None
    failure: LLMOutputInvalid | None = None


@dataclass(frozen=True, slots=True)
class Split(Generic[I]):
    """A segment whose reply was unusable, and was split."""

    items: tuple[I, ...]
    failure: LLMOutputInvalid


@dataclass(slots=True)
class Bisection(Generic[I, R]):
    settled: list[Settled[I, R]] = field(default_factory=list)
    splits: list[Split[I]] = field(default_factory=list)
    attempts: int = 0
    interrupted: LLMError | None = None
    """The transport failure that stopped it, if one did (the caller must raise it)."""

    @property
    def accepted(self) -> list[Settled[I, R]]:
        return [s for s in self.settled if s.failure is None]

    @property
    def failed(self) -> list[Settled[I, R]]:
        return [s for s in self.settled if s.failure is not None]

    @property
    def count(self) -> int:
        """How many items are settled (the length of the settled prefix)."""
        return sum(len(s.items) for s in self.settled)


def attempts_to_first(count: int) -> int:
    """Attempts that settle the first of `count` items when every attempt fails."""
    return math.ceil(math.log2(max(count, 1))) + 1


async def bisect(
    segments: Sequence[Sequence[I]],
    attempt: Callable[[tuple[I, ...]], Awaitable[R]],
    max_attempts: int,
) -> Bisection[I, R]:
    """Settle the items of `segments` (tried as given first), in order; see the module doc."""
    todo = [tuple(s) for s in reversed(segments) if s]
    first = len(todo[-1]) if todo else 0
    budget = max(max_attempts, attempts_to_first(first))
    out: Bisection[I, R] = Bisection()
    while todo and out.attempts < budget:
        segment = todo.pop()
        out.attempts += 1
        try:
            out.settled.append(Settled(segment, result=await attempt(segment)))
        except LLMOutputInvalid as failure:
            if len(segment) == 1:
                out.settled.append(Settled(segment, failure=failure))
            else:
                out.splits.append(Split(segment, failure))
                half = len(segment) // 2
                todo += [segment[half:], segment[:half]]
        except LLMError as exc:
            out.interrupted = exc
            break
    return out
