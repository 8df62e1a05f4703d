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


def reciprocal_rank_fusion(
    lists: Mapping[tuple[Layer, str], Sequence[Candidate]],
    k: int = DEFAULT_RRF_K,
    weights: Mapping[tuple[Layer, str], float] | None = None,
) -> list[Fused]:
    """Fuse ranked lists keyed by (layer, retriever): score = Σ weight / (k + rank), rank from 1.

    Ties are broken by the best single rank, then by id, so the order is deterministic.
    """
    fused: dict[tuple[Layer, str], Fused] = {}
    for (layer, retriever), candidates in lists.items():
        weight = 1.0 if weights is None else weights.get((layer, retriever), 1.0)
        for rank, candidate in enumerate(candidates, start=1):
            entry = fused.setdefault((layer, candidate.id), Fused(layer, candidate.id))
            entry.score += weight / (k + rank)
            entry.ranks[f"{layer.value}:{retriever}"] = rank
            entry.scores[f"{layer.value}:{retriever}"] = candidate.score
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values()), f.id))
