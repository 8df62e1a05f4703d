"""Hybrid search: BM25 and vector candidates per layer, fused by reciprocal rank.

How it ranks is one `RetrievalConfig` (`config.py`): the product's defaults, or a variant the
evaluation harness measures through this same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from stratamem.domain import Hit, Layer, Scope
from stratamem.errors import InvalidInput
from stratamem.retrieval.config import RetrievalConfig
from stratamem.retrieval.feedback import feedback_terms
from stratamem.retrieval.fusion import Fused, Fusion
from stratamem.retrieval.sessions import session_ranked
from stratamem.retrieval.speakers import prefer_named_speaker
from stratamem.store.core.port import Candidate, Filters, Store

MAX_K = 200
MAX_QUERY_CHARS = 4000
#: Fused candidates loaded per wanted hit, so the speaker preference can reorder them; and
#: how many are loaded in the first pass, whose best hits give the feedback words.
POOL_FACTOR = 2
FEEDBACK_POOL = 10
#: Where a hybrid search's vector searches run, alongside its full-text ones.
_VECTOR_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="vector-search")


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
    config: RetrievalConfig,
) -> list[Hit]:
    """Run every retriever of every asked layer, fuse, then once more with the feedback words
    of the best hits (`feedback.py`), lift the best hit of the sessions the hits point at
    (`sessions.py`), and load the top `k` hits."""
    request.validate()
    return await asyncio.to_thread(_search, store, scope, request, query_vector, config)


def _search(
    store: Store,
    scope: Scope,
    request: SearchRequest,
    query_vector: np.ndarray | None,
    config: RetrievalConfig,
) -> list[Hit]:
    limit = max(config.candidates, request.k)
    fusion = Fusion(config.rrf_k)
    lists = candidate_lists(store, scope, request, query_vector, limit, config)
    for (layer, retriever), candidates in lists.items():
        fusion.add(layer, retriever, candidates, config.weight(retriever))
    loaded: dict[tuple[Layer, str], Hit] = {}
    pool = request.k * POOL_FACTOR
    if config.feedback:
        first = _fused_hits(store, scope, request, fusion, config, FEEDBACK_POOL, loaded)
        terms = feedback_terms(
            request.query, first[: request.k], config.feedback_hits, config.feedback_terms
        )
        if terms:
            for layer in request.layers:
                found = store.search_text(
                    scope, layer, " ".join(terms), request.filters, limit,
                    max_share=config.feedback_max_share, phrases=False,
                    fields=config.turn_fields, max_rows=config.feedback_max_rows,
                )  # fmt: skip
                fusion.add(layer, "feedback", found, config.weight("feedback"))
    hits = _fused_hits(store, scope, request, fusion, config, pool, loaded)
    ranked = session_ranked(hits, config.session_weight, config.rrf_k, config.session_depth)
    return ranked[: request.k]


def _fused_hits(
    store: Store,
    scope: Scope,
    request: SearchRequest,
    fusion: Fusion,
    config: RetrievalConfig,
    pool: int,
    loaded: dict[tuple[Layer, str], Hit],
) -> list[Hit]:
    """The fusion's best `pool`, loaded (reusing `loaded`), the speaker the query names
    preferred, repeats dropped: every distinct hit of the pool, best first."""
    fused = fusion.ranked()[:pool]
    _load_missing(store, scope, fused, loaded)
    hits = [
        loaded[key].scored(f.score, dict(f.ranks), dict(f.scores))
        for f in fused
        if (key := (f.layer, f.id)) in loaded  # else deleted between search and load
    ]
    preferred = prefer_named_speaker(request.query, hits, config.speaker_factor)
    return without_repeats(preferred)


def without_repeats(hits: Sequence[Hit]) -> list[Hit]:
    """Drop a hit whose turns are all covered by better hits: a turn already in the list, or a
    memory drawn only from turns already in it (the offline L1 makes one per sentence)."""
    kept: list[Hit] = []
    covered: set[str] = set()
    for hit in hits:
        turns = {hit.id} if hit.layer is Layer.L0 else set(hit.source_turn_ids)
        if turns and turns <= covered:
            continue
        kept.append(hit)
        covered |= turns
    return kept


def candidate_lists(
    store: Store,
    scope: Scope,
    request: SearchRequest,
    query_vector: np.ndarray | None,
    limit: int,
    config: RetrievalConfig,
) -> dict[tuple[Layer, str], list[Candidate]]:
    """On a store whose searches run in parallel (PostgreSQL, and SQLite with its readers: each
    is a query of its own connection), the vector searches run on `_VECTOR_THREADS` while this
    thread runs the full-text ones: waiting for one then the other cost the hybrid search their
    sum (PostgreSQL at 1M rows: p50 9.2 ms sequential, 6.3 ms alongside; SQLite at 100k
    memories p95 18.0 -> 13.5 ms, LoCoMo dev 17.8 -> 15.5 ms). A SQLite store without readers
    runs them one after the other: on its one connection the threads only contended. The lists
    keep their order (fusion breaks ties by it)."""
    vectors: dict[Layer, Future[list[Candidate]]] = {}
    if query_vector is not None and config.vector_weight > 0:
        run = _VECTOR_THREADS.submit if store.searches_in_parallel else _run_now
        for layer in request.layers:
            vectors[layer] = run(
                store.search_vector, scope, layer, query_vector, request.filters, limit
            )
    texts: dict[Layer, list[Candidate]] = {}
    try:
        for layer in request.layers:
            if config.bm25_weight > 0:
                texts[layer] = store.search_text(
                    scope, layer, request.query, request.filters, limit,
                    phrases=config.phrases, fields=config.turn_fields,
                )  # fmt: skip
    finally:
        found = {layer: future.result() for layer, future in vectors.items()}
    lists: dict[tuple[Layer, str], list[Candidate]] = {}
    for layer in request.layers:
        if layer in texts:
            lists[(layer, "bm25")] = texts[layer]
        if layer in found:
            lists[(layer, "vector")] = found[layer]
    return lists


def _run_now(
    search: Callable[..., list[Candidate]], *args: object
) -> Future[list[Candidate]]:
    """`search(*args)` run here and now, as a finished future."""
    future: Future[list[Candidate]] = Future()
    future.set_result(search(*args))
    return future


def _load_missing(
    store: Store, scope: Scope, fused: Sequence[Fused], loaded: dict[tuple[Layer, str], Hit]
) -> None:
    for layer in {f.layer for f in fused}:
        wanted = [f.id for f in fused if f.layer is layer and (layer, f.id) not in loaded]
        if wanted:
            for hit_id, hit in store.load_hits(scope, layer, wanted).items():
                loaded[(layer, hit_id)] = hit
