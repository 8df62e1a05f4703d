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


def best_per_record(
    vectors: np.ndarray, owners: list[int], query: np.ndarray, allowed: set[int] | None
) -> list[tuple[int, float]]:
    """Every record at its best cosine, best first: what an exact `top` must return."""
    best: dict[int, float] = {}
    for owner, score in zip(owners, (vectors @ query).tolist(), strict=True):
        if allowed is None or owner in allowed:
            best[owner] = max(score, best.get(owner, -2.0))
    return sorted(best.items(), key=lambda item: -item[1])


def test_records_of_many_vectors_come_once_each_best_first_as_an_exact_scan_ranks_them() -> None:
    """Records of 1 to 6 vectors (a turn's sentence pieces), some rewritten (dead positions),
    with and without a restriction, limits below and above the number of records."""
    rng = np.random.default_rng(9)
    counts = rng.integers(1, 7, size=120)
    vectors = unit_rows(int(counts.sum()), 24, seed=10)
    starts = np.concatenate([[0], np.cumsum(counts)])
    cache = VectorCache(dim=24, exact_max=10**9)
    blobs = [vectors[starts[r] : starts[r + 1]].tobytes() for r in range(120)]
    cache.add(list(range(1, 121)), blobs, 120)
    rewritten = unit_rows(10 * 2, 24, seed=11)
    cache.add(list(range(1, 11)), [rewritten[2 * i : 2 * i + 2].tobytes() for i in range(10)], 121)
    kept = range(10, 120)  # records 11-120 keep their first vectors
    alive = np.concatenate([rewritten, *(vectors[starts[r] : starts[r + 1]] for r in kept)])
    owners = [1 + i // 2 for i in range(20)] + [r + 1 for r in kept for _ in range(counts[r])]
    for query in unit_rows(20, 24, seed=12):
        for allowed in (None, {int(r) for r in rng.choice(120, size=15, replace=False) + 1}):
            expected = best_per_record(alive, owners, query, allowed)
            mask = None if allowed is None else np.array(sorted(allowed))
            for limit in (1, 10, 50, 200):
                found = cache.top(query, limit, mask)
                assert [rid for rid, _ in found] == [rid for rid, _ in expected[:limit]]
                want = [s for _, s in expected[:limit]]
                assert np.allclose([s for _, s in found], want, atol=1e-6)


def test_equal_cosines_come_back_by_record_id_whatever_the_cpu_sums() -> None:
    """Rows holding the same values at other coordinates (as the hashing embedder makes them)
    all have one cosine with a uniform query, but float32 sums of them differ in the last bit
    with the order of the terms (which the CPU's vector width decides), and a partial sort
    keeps equal scores in no set order: the ranking moved between CPUs. Equal cosines now rank
    by record id, and their scores are equal."""
    rng = np.random.default_rng(5)
    values = rng.uniform(0.1, 1.0, size=16)
    values = (values / np.linalg.norm(values)).astype(np.float32)  # every row the same values
    rows = np.zeros((400, 384), dtype=np.float32)
    for row in rows:
        row[rng.choice(384, size=16, replace=False)] = rng.permutation(values)
    query = np.full(384, 1 / np.sqrt(384), dtype=np.float32)
    float32_sums = rows @ query
    assert len(set(float32_sums.tolist())) > 1  # what the fix is for: not all equal in float32
    for limit in (1, 7, 50):
        found = cache_of(rows, exact_max=10**9).top(query, limit)
        assert [rid for rid, _ in found] == list(range(1, limit + 1))
        assert len({score for _, score in found}) == 1


def test_the_sign_bit_pass_keeps_every_vector_tied_at_its_last_place() -> None:
    """Vectors with the same sign bits are all as close to the query by the first pass; it
    keeps every one of them, not those a partial sort happens to put first, so the best by
    cosine among them is found (and the same ones on every CPU)."""
    rng = np.random.default_rng(8)
    signs = np.where(rng.random(64) < 0.5, -1.0, 1.0)
    rows = (np.abs(rng.normal(size=(3000, 64))) * signs).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    query = unit_rows(1, 64, seed=9)[0]
    coarse, exact = cache_of(rows, exact_max=0), cache_of(rows, exact_max=10**9)
    assert [rid for rid, _ in coarse.top(query, 5)] == [rid for rid, _ in exact.top(query, 5)]
