"""Exact nearest-neighbour scan over an in-memory copy of a tenant's vectors.

The store keeps vectors as float32 blobs in the records' own rows; this cache mirrors them per
(tenant, layer) and catches up incrementally by the `emb_seq` each write stamps. Why an exact
scan and not an index: see docs/vector-index.md for the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class VectorCache:
    """Vectors of one (tenant, layer), with the row ids they belong to."""

    dim: int
    generation: str = ""
    max_seq: int = 0
    rids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    size: int = 0
    _position: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.matrix = np.zeros((0, self.dim), dtype=np.float32)

    def add(self, rids: list[int], blobs: list[bytes], max_seq: int) -> None:
        """Insert or overwrite the vectors of `rids`."""
        for rid, blob in zip(rids, blobs, strict=True):
            vector = np.frombuffer(blob, dtype=np.float32)
            if vector.shape[0] != self.dim:
                continue  # written under another model; reindex replaces it
            position = self._position.get(rid)
            if position is None:
                position = self._append_slot(rid)
            self.matrix[position] = vector
        self.max_seq = max(self.max_seq, max_seq)

    def _append_slot(self, rid: int) -> int:
        if self.size == self.matrix.shape[0]:
            capacity = max(1024, self.size * 2)
            matrix = np.zeros((capacity, self.dim), dtype=np.float32)
            matrix[: self.size] = self.matrix[: self.size]
            rids = np.zeros(capacity, dtype=np.int64)
            rids[: self.size] = self.rids[: self.size]
            self.matrix, self.rids = matrix, rids
        position = self.size
        self.rids[position] = rid
        self._position[rid] = position
        self.size += 1
        return position

    def top(
        self, query: np.ndarray, limit: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The `limit` best (rid, cosine) pairs; `allowed` restricts to those row ids."""
        if self.size == 0 or limit <= 0:
            return []
        scores = self.matrix[: self.size] @ query.astype(np.float32, copy=False)
        if allowed is not None:
            mask = np.isin(self.rids[: self.size], allowed, assume_unique=False)
            scores = np.where(mask, scores, -np.inf)
        count = min(limit, self.size)
        best = np.argpartition(-scores, count - 1)[:count]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [
            (int(self.rids[i]), float(scores[i])) for i in best if np.isfinite(scores[i])
        ]
