"""Hybrid search: BM25 and vector candidates per layer, fused by reciprocal rank."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from stratamem.domain import Hit, Layer, Scope
from stratamem.errors import InvalidInput
from stratamem.retrieval.fusion import Fused, reciprocal_rank_fusion
from stratamem.retrieval.speakers import prefer_named_speaker
from stratamem.store.base import Candidate, Filters, Store

MAX_K = 200
MAX_QUERY_CHARS = 4000
#: Weight of each retriever's ranks in the fusion. On conversations (LoCoMo) the words of a turn
#: and its neighbours find evidence better than a sentence embedding of the turn alone; the
#: vector ranks break ties and add what has no word in common with the query.
RETRIEVER_WEIGHTS = {"bm25": 1.0, "vector": 0.3}
#: Fused candidates loaded per wanted hit, so the speaker preference can reorder them.
POOL_FACTOR = 2


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    k: int = 10
    layers: tuple[Layer, ...] = (Layer.L1, Layer.L0)
    filters: Filters = field(default_factory=Filters)

    def validate(self) -> None:
        if not self.query.strip():
            raise InvalidInput("the search query is empty")
        if len(self.query) > MAX_QUERY_CHARS:
            raise InvalidInput(f"the search query is longer than {MAX_QUERY_CHARS} characters")
        if not 1 <= self.k <= MAX_K:
            raise InvalidInput(f"k must be between 1 and {MAX_K}, got {self.k}")
        if not self.layers:
            raise InvalidInput("search needs at least one layer")


async def hybrid_search(
    store: Store,
    scope: Scope,
    request: SearchRequest,
    query_vector: np.ndarray | None,
    candidates: int,
    rrf_k: int,
) -> list[Hit]:
    """Run every retriever of every asked layer, fuse, and load the top `k` hits."""
    request.validate()
    limit = max(candidates, request.k)
    lists = await asyncio.to_thread(
        _candidate_lists, store, scope, request, query_vector, limit
    )
    weights = {key: RETRIEVER_WEIGHTS.get(key[1], 1.0) for key in lists}
    fused = reciprocal_rank_fusion(lists, k=rrf_k, weights=weights)
    hits = await asyncio.to_thread(_load, store, scope, fused[: request.k * POOL_FACTOR])
    return prefer_named_speaker(request.query, hits)[: request.k]


def _candidate_lists(
    store: Store,
    scope: Scope,
    request: SearchRequest,
    query_vector: np.ndarray | None,
    limit: int,
) -> dict[tuple[Layer, str], list[Candidate]]:
    lists: dict[tuple[Layer, str], list[Candidate]] = {}
    for layer in request.layers:
        lists[(layer, "bm25")] = store.search_text(
            scope, layer, request.query, request.filters, limit
        )
        if query_vector is not None:
            lists[(layer, "vector")] = store.search_vector(
                scope, layer, query_vector, request.filters, limit
            )
    return lists


def _load(store: Store, scope: Scope, fused: Sequence[Fused]) -> list[Hit]:
    hits: list[Hit] = []
    by_layer: dict[Layer, dict[str, Hit]] = {}
    for layer in {f.layer for f in fused}:
        by_layer[layer] = store.load_hits(scope, layer, [f.id for f in fused if f.layer is layer])
    for entry in fused:
        hit = by_layer[entry.layer].get(entry.id)
        if hit is not None:  # deleted between search and load
            hits.append(replace(hit, score=entry.score, ranks=entry.ranks))
    return hits
