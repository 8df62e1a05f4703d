"""Embedders behind one contract (`Embedder`), and `make_embedder` to build one from a spec.

Specs: `"local"` / `"minilm"` (all-MiniLM-L6-v2 in-process), `"hash"` / `"hash:<dim>"` (feature
hashing, no dependencies), `"openai:<model>"` (any OpenAI-compatible endpoint; needs `base_url`),
`"none"` (no embedder: BM25 only; `make_embedder` returns None).
"""

from __future__ import annotations

from stratamem.embed import hashing, local, openai
from stratamem.embed.base import Embedder, Vectors, normalise_rows
from stratamem.embed.hashing import HashingEmbedder
from stratamem.embed.local import LocalEmbedder
from stratamem.embed.openai import OpenAIEmbedder
from stratamem.errors import ConfigError, EmbeddingError

__all__ = [
    "Embedder",
    "EmbeddingError",
    "HashingEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "Vectors",
    "make_embedder",
    "normalise_rows",
]

_LOCAL_SPECS = frozenset({"local", "minilm", "all-minilm-l6-v2"})


def make_embedder(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    dim: int | None = None,
    batch_size: int | None = None,
    timeout_s: float | None = None,
) -> Embedder | None:
    """Build the embedder named by `spec`; raises `ConfigError` for an unknown or incomplete one."""
    name, _, arg = spec.strip().partition(":")
    kind = name.lower()
    if kind == "none" and not arg:
        return None
    if kind in _LOCAL_SPECS and not arg:
        return LocalEmbedder(batch_size=batch_size or local.DEFAULT_BATCH_SIZE)
    if kind == "hash":
        return HashingEmbedder(_hash_dim(spec, arg, dim))
    if kind == "openai":
        return _openai(
            spec,
            arg,
            base_url=base_url,
            api_key=api_key,
            dim=dim,
            batch_size=batch_size,
            timeout_s=timeout_s,
        )
    raise ConfigError(
        f"unknown embedder {spec!r}: use 'local', 'hash', 'hash:<dim>', 'openai:<model>' or 'none'"
    )


def _hash_dim(spec: str, arg: str, dim: int | None) -> int:
    if not arg:
        return dim or hashing.DEFAULT_DIM
    if not arg.isdigit() or int(arg) < 8:
        raise ConfigError(f"embedder {spec!r}: the hash dimension must be an integer >= 8")
    return int(arg)


def _openai(
    spec: str,
    model: str,
    *,
    base_url: str | None,
    api_key: str | None,
    dim: int | None,
    batch_size: int | None,
    timeout_s: float | None,
) -> OpenAIEmbedder:
    if not model:
        raise ConfigError(f"embedder {spec!r} names no model: use 'openai:<model>'")
    if not base_url:
        raise ConfigError(f"embedder {spec!r} needs a base URL (for example http://host:port/v1)")
    return OpenAIEmbedder(
        model,
        base_url=base_url,
        api_key=api_key,
        dim=dim,
        batch_size=batch_size or openai.DEFAULT_BATCH_SIZE,
        timeout_s=timeout_s or openai.DEFAULT_TIMEOUT_S,
    )
