"""The vector cache: exact scan, and the sign-bit first pass used for large caches."""

from __future__ import annotations

import numpy as np

from stratamem.store.core.vectors import VectorCache


def cache_of(vectors: np.ndarray, exact_max: int) -> VectorCache:
    cache = VectorCache(dim=vectors.shape[1], exact_max=exact_max)
    cache.add(list(range(1, len(vectors) + 1)), [v.tobytes() for v in vectors], len(vectors))
    return cache


def unit_rows(count: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_quantised_pass_finds_the_true_nearest_neighbour() -> None:
    """Queries near stored vectors; beyond the nearest one, random vectors are all about as far
    from a query, so only the nearest is a fair target here (bench/vector_recall.py measures
    agreement at k = 10 on real embeddings)."""
    vectors = unit_rows(3000, 384, seed=1)
    exact, coarse = cache_of(vectors, exact_max=10**9), cache_of(vectors, exact_max=0)
    noisy = vectors[:50] + 0.08 * unit_rows(50, 384, seed=2)
    overlap = []
    for query in noisy / np.linalg.norm(noisy, axis=1, keepdims=True):
        overlap.append(exact.top(query, 1) == coarse.top(query, 1))
    assert np.mean(overlap) >= 0.95


def test_quantised_pass_returns_exact_cosines_in_order() -> None:
    vectors = unit_rows(500, 32, seed=3)
    coarse = cache_of(vectors, exact_max=0)
    found = coarse.top(vectors[41], 5)
    assert found[0] == (42, found[0][1])
    assert abs(found[0][1] - 1.0) < 1e-5
    scores = [score for _, score in found]
    assert scores == sorted(scores, reverse=True)


def test_allowed_rows_restrict_both_passes() -> None:
    vectors = unit_rows(400, 16, seed=4)
    for exact_max in (0, 10**9):
        cache = cache_of(vectors, exact_max)
        found = cache.top(vectors[0], 5, allowed=np.array([7, 9]))
        assert {rid for rid, _ in found} <= {7, 9}


def test_overwriting_a_row_replaces_its_vector() -> None:
    vectors = unit_rows(2, 8, seed=5)
    cache = cache_of(vectors, exact_max=10)
    cache.add([1], [vectors[1].tobytes()], 3)
    assert cache.size == 2
    assert cache.top(vectors[1], 2)[0][1] > 0.999


def test_a_record_with_several_vectors_is_listed_once_at_its_best() -> None:
    vectors = unit_rows(60, 16, seed=6)
    for exact_max in (0, 10**9):
        cache = VectorCache(dim=16, exact_max=exact_max)
        # record r owns vectors 3(r-1) .. 3(r-1)+2: twenty records of three vectors each
        cache.add(
            list(range(1, 21)),
            [vectors[i : i + 3].tobytes() for i in range(0, 60, 3)],
            20,
        )
        found = cache.top(vectors[31], 5)
        assert found[0][0] == 11  # vector 31 belongs to record 11
        assert abs(found[0][1] - 1.0) < 1e-5
        assert len({rid for rid, _ in found}) == len(found) == 5


def test_rewriting_a_record_with_fewer_vectors_forgets_the_old_ones() -> None:
    vectors = unit_rows(3, 8, seed=7)
    cache = VectorCache(dim=8, exact_max=10)
    cache.add([1, 2], [vectors[:2].tobytes(), vectors[2].tobytes()], 2)
    cache.add([1], [vectors[2].tobytes()], 3)
    assert [rid for rid, _ in cache.top(vectors[0], 2) if _ > 0.999] == []
    assert {rid for rid, score in cache.top(vectors[2], 2) if score > 0.999} == {1, 2}


def test_a_blob_that_is_not_whole_vectors_of_the_cache_width_is_skipped() -> None:
    cache = VectorCache(dim=8)
    cache.add([1, 2], [unit_rows(1, 12, seed=8).tobytes(), b""], 1)
    assert cache.size == 0
