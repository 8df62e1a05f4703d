"""Retrieval metrics over evidence turns: recall@k, reciprocal rank, latency percentiles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The categories measured (LoCoMo: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop).
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True, slots=True)
class QuestionResult:
    """One question: its evidence turns and, per ranked hit, the turns that hit stands for."""

    sample_id: str
    category: int
    question: str
    evidence: frozenset[str]
    ranked: tuple[frozenset[str], ...]
    hit_chars: tuple[int, ...]
    latency_ms: float
    embed_ms: float = 0.0
    """The part of `latency_ms` spent embedding the query."""

    def recall_at(self, k: int) -> float:
        """The fraction of evidence turns covered by the first `k` hits."""
        found: set[str] = set()
        for turns in self.ranked[:k]:
            found |= turns
        return len(found & self.evidence) / len(self.evidence)

    def reciprocal_rank(self) -> float:
        """1 / rank of the first hit covering any evidence turn (0 when none does)."""
        for rank, turns in enumerate(self.ranked, start=1):
            if turns & self.evidence:
                return 1.0 / rank
        return 0.0

    def context_chars(self, k: int) -> int:
        return sum(self.hit_chars[:k])


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def block_summary(results: Sequence[QuestionResult], ks: Sequence[int]) -> dict[str, Any]:
    """Recall@k, MRR and context size over a set of questions."""
    return {
        "questions": len(results),
        "recall_at_k": {str(k): round(_mean([r.recall_at(k) for r in results]), 4) for k in ks},
        "mrr": round(_mean([r.reciprocal_rank() for r in results]), 4),
        "context_chars_at_k": {
            str(k): round(_mean([r.context_chars(k) for r in results]), 1) for k in ks
        },
    }


def summarise(results: Sequence[QuestionResult], ks: Sequence[int]) -> dict[str, Any]:
    """Overall and per-category metrics, with search latency percentiles."""
    summary = block_summary(results, ks)
    summary["per_category"] = {
        str(c): block_summary([r for r in results if r.category == c], ks) for c in CATEGORIES
    }
    parts = {
        "search": [r.latency_ms for r in results],
        "query_embed": [r.embed_ms for r in results],
        "retrieval": [r.latency_ms - r.embed_ms for r in results],
    }
    for name, values in parts.items():
        summary[f"{name}_p50_ms"] = round(percentile(values, 50), 2)
        summary[f"{name}_p95_ms"] = round(percentile(values, 95), 2)
    return summary
