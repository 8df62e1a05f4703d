"""Embedders behind one contract (`Embedder`), and `make_embedder` to build one from a spec.

Specs: `"local"` / `"minilm"` (all-MiniLM-L6-v2 in-process on ONNX Runtime, 8-bit block
weights: `"local:q8"`), `"local:fp32"` (its float32 graph), `"local:int8"` (its int8-quantised
graph), `"onnx:<dir>"` (any ONNX sentence encoder in a directory), `"st"` (all-MiniLM-L6-v2 on
sentence-transformers and torch), `"hash"` / `"hash:<dim>"` (feature hashing, no dependencies),
`"openai:<model>"` (any OpenAI-compatible endpoint; needs `base_url`), `"none"` (no embedder:
BM25 only; `make_embedder` returns None).
"""

from __future__ import annotations

from pathlib import Path

from stratamem.embed import hashing, local, onnx_encoder, openai
from stratamem.embed.base import Embedder, Vectors, normalise_rows
from stratamem.embed.hashing import HashingEmbedder
from stratamem.embed.local import LocalEmbedder
from stratamem.embed.onnx_encoder import OnnxEmbedder
from stratamem.embed.openai import OpenAIEmbedder
from stratamem.errors import ConfigError, EmbeddingError

__all__ = [
    "Embedder",
    "EmbeddingError",
    "HashingEmbedder",
    "LocalEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "Vectors",
    "make_embedder",
    "normalise_rows",
]

_LOCAL_SPECS = frozenset({"local", "minilm", "all-minilm-l6-v2"})
_ST_SPECS = frozenset({"st", "sentence-transformers"})
_SPECS = (
    "'local', 'local:fp32', 'local:int8', 'onnx:<dir>', 'st', 'hash', 'hash:<dim>',"
    " 'openai:<model>' or 'none'"
)


def make_embedder(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    dim: int | None = None,
    batch_size: int | None = None,
    timeout_s: float | None = None,
    onnx_spinning: bool = False,
) -> Embedder | None:
    """Build the embedder named by `spec`; raises `ConfigError` for an unknown or incomplete one.
    `onnx_spinning` is for the ONNX Runtime ones (`local*`, `onnx:`)."""
    name, _, arg = spec.strip().partition(":")
    kind = name.lower()
    if kind == "none" and not arg:
        return None
    batch = batch_size or local.DEFAULT_BATCH_SIZE
    if kind in _LOCAL_SPECS and arg.lower() in ("", *local.PRECISIONS):
        return LocalEmbedder(
            precision=arg.lower() or "q8", batch_size=batch, spinning=onnx_spinning
        )
    if kind == "onnx":
        return _onnx_directory(spec, arg, batch, onnx_spinning)
    if kind in _ST_SPECS and not arg:
        from stratamem.embed.st import SentenceTransformerEmbedder  # noqa: PLC0415

        return SentenceTransformerEmbedder(batch_size=batch)
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
    raise ConfigError(f"unknown embedder {spec!r}: use {_SPECS}")


def _onnx_directory(spec: str, arg: str, batch_size: int, spinning: bool) -> OnnxEmbedder:
    """`onnx:<dir>`: the model's name is `onnx:` and the directory's name."""
    if not arg:
        raise ConfigError(f"embedder {spec!r} names no directory: use 'onnx:<dir>'")
    folder = Path(arg).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"embedder {spec!r}: {folder} is not a directory")
    return OnnxEmbedder(
        f"onnx:{folder.resolve().name}",
        lambda: onnx_encoder.model_in_directory(folder),
        batch_size=batch_size,
        spinning=spinning,
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
