"""Reciprocal rank fusion of independent candidate lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stratamem.domain import Layer
from stratamem.store.core.port import Candidate

DEFAULT_RRF_K = 60


@dataclass(slots=True)
class Fused:
    layer: Layer
    id: str
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    """Each retriever's own score (BM25, cosine …), under the same keys as `ranks`."""


class Fusion:
    """A fusion that lists join one after another (`add`), ranked whenever asked (`ranked`):
    the search fuses its first lists, then the same sums with the feedback lists added, rather
    than fusing every list again. The order lists are added in is the order their terms are
    summed in, so it gives the same scores as `reciprocal_rank_fusion` of the lists in that
    order. Each `ranked` answer's entries go on changing with later `add`s."""

    def __init__(self, k: int = DEFAULT_RRF_K) -> None:
        self.k = k
        self._fused: dict[tuple[Layer, str], Fused] = {}

    def add(
        self, layer: Layer, retriever: str, candidates: Sequence[Candidate], weight: float = 1.0
    ) -> None:
        """Add a list's terms, weight / (k + rank), rank from 1."""
        name = f"{layer.value}:{retriever}"
        fused, k = self._fused, self.k
        for rank, candidate in enumerate(candidates, start=1):
            entry = fused.get((layer, candidate.id))
            if entry is None:
                entry = fused[(layer, candidate.id)] = Fused(layer, candidate.id)
            entry.score += weight / (k + rank)
            entry.ranks[name] = rank
            entry.scores[name] = candidate.score

    def ranked(self) -> list[Fused]:
        """Best first; ties broken by the best single rank, then by id (deterministic)."""
        return sorted(self._fused.values(), key=_order)


def _order(f: Fused) -> tuple[float, int, str]:
    return -f.score, min(f.ranks.values()), f.id


def reciprocal_rank_fusion(
    lists: Mapping[tuple[Layer, str], Sequence[Candidate]],
    k: int = DEFAULT_RRF_K,
    weights: Mapping[tuple[Layer, str], float] | None = None,
) -> list[Fused]:
    """Fuse ranked lists keyed by (layer, retriever): score = Σ weight / (k + rank), rank from 1.

    Ties are broken by the best single rank, then by id, so the order is deterministic.
    """
    fusion = Fusion(k)
    for (layer, retriever), candidates in lists.items():
        weight = 1.0 if weights is None else weights.get((layer, retriever), 1.0)
        fusion.add(layer, retriever, candidates, weight)
    return fusion.ranked()
