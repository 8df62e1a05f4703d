"""Nearest-neighbour scan over an in-memory copy of a tenant's vectors.

The store keeps vectors as float32 blobs in the records' own rows; this cache mirrors them per
(tenant, layer) and catches up incrementally by the `emb_seq` each write stamps. A record may have
several vectors (a turn has one per sentence, see `pieces.py`): its blob holds them one after
another, and the record scores as its best vector.

Up to `EXACT_MAX` vectors the scan is exact. Beyond it, a first pass ranks every vector by the
Hamming distance of its sign bits (binary quantisation: 48 bytes per 384-d vector, a scan of
100k vectors reads under 5 MB) and the best `RESCORE_FACTOR * limit` candidates are re-scored
exactly. The figures behind these choices are in docs/vector-index.md.

The order of the best candidates is the same on every machine and every run: the fast float32
scores pick them (with every one near the last place kept), and they are ranked by scores
computed again with float64 sums, ties by record id (the order records were written, not
embedded). A float32 sum's last bit depends on the CPU's vector width, and the selection's
order of equal scores on its sort kernels, so equal cosines (frequent with the hashing
embedder) came back in another order on another CPU.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

EXACT_MAX = 2_048
RESCORE_FACTOR = 4
RESCORE_MIN = 200
#: When records have several vectors: vectors looked at per wanted record (times the average
#: count per record) before keeping each record's best; widened if records repeat too much.
PIECES_FACTOR = 2
#: Slots of a cache's first arrays (doubled as it fills): small, as most tenants are.
FIRST_CAPACITY = 64
#: Bytes of vectors the caches of one store keep (about 170,000 384-d vectors); beyond it, the
#: caches of the (tenant, layer)s searched least recently are dropped (reloaded when searched).
CACHE_MAX_BYTES = 256 * 2**20
#: Candidates within this much of the last selected score are ranked again too: float32 sums of
#: one cosine differ by far less between CPUs.
TIE_SLACK = 1e-5


def sign_codes(vectors: np.ndarray) -> np.ndarray:
    """Sign bits of each row, packed into uint64 words."""
    bits = np.packbits(vectors > 0, axis=-1)
    pad = (-bits.shape[-1]) % 8
    if pad:
        bits = np.pad(bits, [(0, 0)] * (bits.ndim - 1) + [(0, pad)])
    return np.ascontiguousarray(bits).view(np.uint64)


@dataclass
class VectorCache:
    """Vectors of one (tenant, layer), with the row ids they belong to."""

    dim: int
    generation: str = ""
    max_seq: int = 0
    exact_max: int = EXACT_MAX
    size: int = 0
    rids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    matrix: np.ndarray = field(init=False)
    codes: np.ndarray = field(init=False)
    alive: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    _positions: dict[int, list[int]] = field(default_factory=dict)
    _dead: int = 0

    def __post_init__(self) -> None:
        self.matrix = np.zeros((0, self.dim), dtype=np.float32)
        self.codes = sign_codes(self.matrix)

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (their capacity, not only the vectors in use)."""
        return self.matrix.nbytes + self.codes.nbytes + self.rids.nbytes + self.alive.nbytes

    def add(self, rids: list[int], blobs: list[bytes], max_seq: int) -> None:
        """Insert or overwrite the vectors of `rids` (each blob holds one or more vectors)."""
        for rid, blob in zip(rids, blobs, strict=True):
            flat = np.frombuffer(blob, dtype=np.float32)
            if flat.shape[0] == 0 or flat.shape[0] % self.dim:
                continue  # written under another model; reindex replaces it
            self._put(rid, flat.reshape(-1, self.dim))
        self.max_seq = max(self.max_seq, max_seq)

    def _put(self, rid: int, vectors: np.ndarray) -> None:
        positions = self._positions.get(rid, [])
        if len(positions) != len(vectors):
            self.alive[positions] = False
            self._dead += len(positions)
            positions = [self._append_slot(rid) for _ in range(len(vectors))]
            self._positions[rid] = positions
        self.matrix[positions] = vectors
        self.codes[positions] = sign_codes(vectors)

    def _append_slot(self, rid: int) -> int:
        if self.size == self.matrix.shape[0]:
            self._grow(max(FIRST_CAPACITY, self.size * 2))
        position = self.size
        self.rids[position] = rid
        self.alive[position] = True
        self.size += 1
        return position

    def _grow(self, capacity: int) -> None:
        matrix = np.zeros((capacity, self.dim), dtype=np.float32)
        matrix[: self.size] = self.matrix[: self.size]
        codes = np.zeros((capacity, self.codes.shape[1]), dtype=np.uint64)
        codes[: self.size] = self.codes[: self.size]
        rids = np.zeros(capacity, dtype=np.int64)
        rids[: self.size] = self.rids[: self.size]
        alive = np.zeros(capacity, dtype=bool)
        alive[: self.size] = self.alive[: self.size]
        self.matrix, self.codes, self.rids, self.alive = matrix, codes, rids, alive

    def top(
        self, query: np.ndarray, limit: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The `limit` best (rid, cosine) pairs, a record scoring as its best vector; `allowed`
        restricts to those row ids."""
        if self.size == 0 or limit <= 0:
            return []
        query = query.astype(np.float32, copy=False)
        mask = self._mask(allowed)
        per_record = self._pieces_per_record()
        if self.size <= self.exact_max:  # every vector, scored in place (not copied first)
            positions = np.arange(self.size)
            scores = self.matrix[: self.size] @ query
        else:
            wanted = max(int(limit * per_record * RESCORE_FACTOR), RESCORE_MIN)
            positions = self._coarse(query, wanted, mask)
            scores = self.matrix[positions] @ query
        if mask is not None:
            scores = np.where(mask[positions], scores, -np.inf)
        return self._best_records(positions, scores, query, limit, per_record)

    def _mask(self, allowed: np.ndarray | None) -> np.ndarray | None:
        """Which positions may be returned, or None for all (nothing overwritten or excluded)."""
        mask = None if self._dead == 0 else self.alive[: self.size]
        if allowed is not None:
            kept = np.isin(self.rids[: self.size], allowed)
            mask = kept if mask is None else mask & kept
        return mask

    def _pieces_per_record(self) -> float:
        return max(1.0, (self.size - self._dead) / max(1, len(self._positions)))

    def _best_records(
        self, positions: np.ndarray, scores: np.ndarray, query: np.ndarray, limit: int,
        per_record: float,
    ) -> list[tuple[int, float]]:  # fmt: skip
        """The best `limit` records among scored positions, each once, at its best score.

        Repeats are dropped by one `np.unique` over the best-first candidates (it returns each
        record's first, so best, place), not a Python loop over every candidate: a turn's
        sentence pieces made that loop 3.1 of LoCoMo's 6.8 ms of retrieval (issue 32)."""
        count = min(int(limit * per_record * PIECES_FACTOR) if per_record > 1 else limit,
                    len(positions))  # fmt: skip
        while True:
            best, best_scores = self._ranked(positions, scores, query, count)
            rids = self.rids[positions[best]]
            _, first = np.unique(rids, return_index=True)
            first.sort()
            if len(first) >= limit or count == len(positions) or len(best) < count:
                kept = first[:limit]
                return list(zip(rids[kept].tolist(), best_scores[kept].tolist(), strict=True))
            count = min(count * 2, len(positions))

    def _ranked(
        self, positions: np.ndarray, scores: np.ndarray, query: np.ndarray, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indexes into `positions` of at least the `count` best finite scores, best first, and
        their scores, in an order every machine and every run gives (module docstring): ties by
        record id, as a record's place in the cache is when the catch-up embedded it."""
        chosen = np.argpartition(-scores, count - 1)[:count]
        floor = scores[chosen].min()
        chosen = np.flatnonzero((scores >= floor - TIE_SLACK) & np.isfinite(scores))
        rows = self.matrix[positions[chosen]].astype(np.float64)
        exact = (rows @ query.astype(np.float64)).astype(np.float32)
        order = np.lexsort((self.rids[positions[chosen]], -exact))
        return chosen[order], exact[order]

    def _coarse(self, query: np.ndarray, count: int, mask: np.ndarray | None) -> np.ndarray:
        """Positions of the `count` vectors whose sign bits differ least from the query's, and
        of every other as close as the last of them."""
        counts = np.bitwise_count(self.codes[: self.size] ^ sign_codes(query[None, :])[0])
        hamming = counts[:, 0].astype(np.int32)
        for column in range(1, counts.shape[1]):  # column sums: faster than a short-axis sum
            hamming += counts[:, column]
        if mask is not None:
            hamming = np.where(mask, hamming, np.iinfo(np.int32).max)
        count = min(count, self.size)
        # Every vector as close as the count-th is kept: which of those tied a partial sort
        # keeps depends on its kernels, so the candidates (and the hits) moved between CPUs.
        farthest = np.partition(hamming, count - 1)[count - 1]
        return np.flatnonzero(hamming <= farthest)


class VectorCaches:
    """The `VectorCache`s of a store, per (tenant, layer), least recently searched first.

    `settle` drops the oldest while they hold more than `max_bytes` (never the newest, however
    large), so a process that serves ever more tenants keeps the vectors of those in use, not
    of every tenant it ever searched. Dropping only costs a reload. It keeps a count of the
    bytes held, each cache counted again at the `settle` after it was got (its user grows it in
    between), so a settle costs the same with ten tenants as with ten thousand (it summed every
    cache's arrays: 4 % of a worker's CPU after a few thousand tenants, bench/drain.py). Not
    thread-safe: the store holds its lock around each use. `exact_max`: the size up to which
    each cache's scan is exact (the PostgreSQL store's is its index threshold).
    """

    def __init__(self, max_bytes: int = CACHE_MAX_BYTES, exact_max: int = EXACT_MAX) -> None:
        self.max_bytes = max_bytes
        self.exact_max = exact_max
        self._caches: OrderedDict[tuple[str, str], VectorCache] = OrderedDict()
        self._counted: dict[tuple[str, str], int] = {}  # bytes of each cache, at its last count
        self._total = 0
        self._got: set[tuple[str, str]] = set()  # got since the last settle

    def __len__(self) -> int:
        return len(self._caches)

    @property
    def nbytes(self) -> int:
        return sum(cache.nbytes for cache in self._caches.values())

    def get(self, tenant: str, layer: str, dim: int, generation: str) -> VectorCache:
        """The cache of (tenant, layer), made anew when missing or of another model."""
        key = (tenant, layer)
        cache = self._caches.get(key)
        if cache is None or cache.generation != generation or cache.dim != dim:
            cache = VectorCache(dim=dim, generation=generation, exact_max=self.exact_max)
            self._caches[key] = cache
        self._caches.move_to_end(key)
        self._got.add(key)
        return cache

    def peek(self, tenant: str, layer: str) -> VectorCache | None:
        """The cache of (tenant, layer) if there is one, not counted as used."""
        return self._caches.get((tenant, layer))

    def settle(self) -> None:
        for key in self._got:
            if (cache := self._caches.get(key)) is not None:
                self._total += cache.nbytes - self._counted.get(key, 0)
                self._counted[key] = cache.nbytes
        self._got.clear()
        while self._total > self.max_bytes and len(self._caches) > 1:
            key, _ = self._caches.popitem(last=False)
            self._total -= self._counted.pop(key, 0)

    def forget(self, tenant: str) -> None:
        for key in [key for key in self._caches if key[0] == tenant]:
            del self._caches[key]
            self._total -= self._counted.pop(key, 0)

    def clear(self) -> None:
        self._caches.clear()
        self._counted.clear()
        self._got.clear()
        self._total = 0
