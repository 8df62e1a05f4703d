"""What gets embedded for a record: the texts whose vectors stand for it.

A memory (L1) is one statement: one vector. A turn (L0) is often several sentences about
different things ("Thanks! We explored the coast. The views were breathtaking."), and one vector
of the whole turn blurs them, so a turn gets one vector per sentence, each prefixed by its
speaker so "who said" stays searchable, and scores as its best sentence (`vectors.py`). On
LoCoMo, sentence vectors find 0.596 of the evidence in the top 10 by the vector alone, against
0.501 for one vector per turn (docs/eval-locomo.md).

Sentences are split at `.`, `!` or `?` followed by a space, and at line breaks; pieces with
fewer than two letters or digits are dropped. A long text is cut into at most `MAX_PIECES`
pieces of consecutive sentences.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from stratamem.domain import Layer
from stratamem.errors import StoreError

#: The most vectors one record gets; the sentences of a longer text are grouped.
MAX_PIECES = 16
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
_TWO_WORD_CHARS = re.compile(r"\w\W*\w")


def embedding_text(layer: Layer, text: str, speaker: str | None) -> str:
    """The whole record as one text: turns carry their speaker."""
    if layer is Layer.L0 and speaker:
        return f"{speaker}: {text}"
    return text


def sentences(text: str) -> list[str]:
    """The sentences of `text` that have at least two letters or digits."""
    return [
        piece
        for piece in (p.strip() for p in _SENTENCE_END.split(text))
        if _TWO_WORD_CHARS.search(piece)
    ]


def embedding_pieces(layer: Layer, text: str, speaker: str | None) -> tuple[str, ...]:
    """The texts embedded for a record, one vector each (at least one, at most `MAX_PIECES`)."""
    if layer is not Layer.L0:
        return (text,)
    found = sentences(text)
    if len(found) <= 1:
        return (embedding_text(layer, text, speaker),)
    return tuple(embedding_text(layer, group, speaker) for group in _grouped(found))


def _grouped(found: list[str]) -> list[str]:
    if len(found) <= MAX_PIECES:
        return found
    size = -(-len(found) // MAX_PIECES)
    return [" ".join(found[i : i + size]) for i in range(0, len(found), size)]


def vector_blobs(
    items: int, vectors: np.ndarray, counts: Sequence[int] | None = None
) -> list[bytes]:
    """One float32 blob per item: `counts[i]` consecutive rows of `vectors` (one without)."""
    sizes = [1] * items if counts is None else list(counts)
    if len(sizes) != items or any(size < 1 for size in sizes):
        raise StoreError(f"{items} items need a positive vector count each, got {sizes}")
    if vectors.ndim != 2 or sum(sizes) != vectors.shape[0]:
        raise StoreError(f"{sum(sizes)} vectors expected, got an array of shape {vectors.shape}")
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    ends = np.cumsum(sizes)
    return [rows[end - size : end].tobytes() for size, end in zip(sizes, ends, strict=True)]


T = TypeVar("T")


def fair_share(queues: Sequence[Sequence[T]], limit: int) -> list[T]:
    """Up to `limit` items taken round-robin from `queues` (each oldest first): the first of
    each queue, then the second of each, and so on."""
    taken: list[T] = []
    for position in range(max((len(q) for q in queues), default=0)):
        for queue in queues:
            if position < len(queue):
                taken.append(queue[position])
                if len(taken) == limit:
                    return taken
    return taken
