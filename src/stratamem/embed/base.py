"""The embedder contract (placeholder until the embedders land)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    model: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    async def aclose(self) -> None: ...
