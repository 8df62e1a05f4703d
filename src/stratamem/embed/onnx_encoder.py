"""Sentence encoders on ONNX Runtime with a `tokenizers` tokenizer: no torch.

`OnnxEmbedder` runs any ONNX sentence encoder whose graph takes `input_ids` and `attention_mask`
(and `token_type_ids`, given as zeros, when it asks for them) and whose first output is either
one vector per text or one per token (then the mean over the attention mask is taken, as
sentence-transformers' mean pooling does). Rows are L2-normalised.

The session and tokenizer are loaded once per process and model (thread-safe), on the CPU, and
every call runs in a worker thread so the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from stratamem.embed.base import Vectors, check_texts, empty, normalise_rows
from stratamem.errors import EmbeddingError

DEFAULT_BATCH_SIZE = 32
DEFAULT_MAX_TOKENS = 256
_DIRECTORY_MAX_TOKENS = 512
_PROBE = "dimension probe"
_INSTALL_HINT = "pip install onnxruntime tokenizers (both are dependencies of stratamem)"


@dataclass(frozen=True, slots=True)
class OnnxModel:
    """The files of an ONNX sentence encoder and the longest input it reads, in tokens."""

    graph: Path
    tokenizer: Path
    max_tokens: int = DEFAULT_MAX_TOKENS


@dataclass(slots=True)
class Runtime:
    session: Any
    tokenizer: Any
    feeds: frozenset[str]
    lock: threading.Lock
    """One run at a time: ONNX Runtime already spreads one run over the cores."""
    dim: int = 0


_loaded: dict[tuple[OnnxModel, bool], Runtime] = {}
_loaded_lock = threading.Lock()


# Spinning (`spinning`; the setting `onnx_spinning`, `STRATAMEM_ONNX_SPINNING`): onnxruntime's
# threads spin between the ~60 operators of one run instead of sleeping and being woken for
# each, and stop spinning when the run ends (`session.force_spinning_stop`): one warm query
# alone took 2.15 ms instead of 2.96 (p50, 2 cores, load 1). It is off by default because the
# tail it gives a real search is worse: over LoCoMo's 760 questions at load 1-2, the query
# embedding took p50 4.4 / p95 13.3 ms with it and 5.0 / 6.5 ms without; at load 7 a query took
# ~40 % more CPU and wall time with it; threads left spinning between runs (onnxruntime's own
# default) cost 20 ms of CPU per query instead of 4.7 at load 15.


def _runtime_errors() -> tuple[type[BaseException], ...]:
    """The exceptions ONNX Runtime raises (they derive from `Exception` only)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415

    names = ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "RuntimeException",
             "InvalidProtobuf", "InvalidGraph", "NotImplemented")  # fmt: skip
    found = tuple(getattr(state, name) for name in names if hasattr(state, name))
    return (OSError, ValueError, RuntimeError, *found)


def load(model: OnnxModel, spinning: bool = False) -> Runtime:
    """The session and tokenizer of `model`, loaded on first use and kept for the process;
    its threads spin within a run with `spinning` (see the note on spinning)."""
    with _loaded_lock:
        runtime = _loaded.get((model, spinning))
        if runtime is None:
            runtime = _open(model, spinning)
            _loaded[(model, spinning)] = runtime
        return runtime


def _open(model: OnnxModel, spinning: bool) -> Runtime:
    try:
        import onnxruntime  # noqa: PLC0415  (imported when a model is first needed)
    except ImportError as e:
        raise EmbeddingError(f"onnxruntime is missing; {_INSTALL_HINT}") from e
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: no warnings on a CLI's stderr
    _thread_settings(options, spinning)
    try:
        session = onnxruntime.InferenceSession(
            str(model.graph), options, providers=["CPUExecutionProvider"]
        )
    except _runtime_errors() as e:
        raise EmbeddingError(f"could not load the ONNX model {model.graph}: {e}") from e
    feeds = frozenset(i.name for i in session.get_inputs())
    if not {"input_ids", "attention_mask"} <= feeds:
        raise EmbeddingError(
            f"the ONNX model {model.graph} takes {sorted(feeds)}; expected input_ids and"
            " attention_mask"
        )
    runtime = Runtime(session, _tokenizer(model), feeds, threading.Lock())
    runtime.dim = int(encode(runtime, [_PROBE]).shape[1])  # also warms the session up
    return runtime


def _thread_settings(options: Any, spinning: bool) -> None:
    """Sleep between operators, or spin within a run only (see the note on spinning)."""
    if spinning:
        options.add_session_config_entry("session.force_spinning_stop", "1")
        return
    for entry in ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning"):
        options.add_session_config_entry(entry, "0")


def _tokenizer(model: OnnxModel) -> Any:
    try:
        from tokenizers import Tokenizer  # noqa: PLC0415  (imported with the model)
    except ImportError as e:
        raise EmbeddingError(f"tokenizers is missing; {_INSTALL_HINT}") from e
    if not model.tokenizer.is_file():
        raise EmbeddingError(f"the tokenizer file {model.tokenizer} is missing")
    try:
        tokenizer = Tokenizer.from_file(str(model.tokenizer))
    except Exception as e:  # tokenizers raises a bare Exception; it is chained, typed
        raise EmbeddingError(f"could not read the tokenizer {model.tokenizer}: {e}") from e
    padding = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=model.max_tokens)
    tokenizer.enable_padding(
        pad_id=int(padding.get("pad_id", 0)), pad_token=str(padding.get("pad_token", "[PAD]"))
    )  # to the longest text of each batch
    return tokenizer


def encode(runtime: Runtime, texts: list[str]) -> npt.NDArray[np.float32]:
    """One batch through the tokenizer and the graph: (len(texts), dim), not yet normalised."""
    encodings = runtime.tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in runtime.feeds:
        feeds["token_type_ids"] = np.zeros_like(ids)
    with runtime.lock:
        try:
            output = np.asarray(runtime.session.run(None, feeds)[0], dtype=np.float32)
        except _runtime_errors() as e:
            raise EmbeddingError(f"the ONNX model failed to embed {len(texts)} texts") from e
    if output.ndim == 3:  # one vector per token: the mean over the real tokens
        weights = mask[:, :, None].astype(np.float32)
        output = (output * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    if output.ndim != 2 or output.shape[0] != len(texts):
        raise EmbeddingError(f"the ONNX model returned an array of shape {output.shape}")
    return output


def encode_sorted(runtime: Runtime, texts: list[str], batch_size: int) -> Vectors:
    """All `texts` in batches of similar length (less padding), rows in the order of `texts`."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    rows = np.empty((len(texts), runtime.dim), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        rows[chosen] = encode(runtime, [texts[i] for i in chosen])
    return normalise_rows(rows, source="the ONNX model")


class OnnxEmbedder:
    """`Embedder` over an ONNX sentence encoder named `name`.

    `source` gives the model's files when it is first needed (it may build them). `dim` is the
    width when known in advance; otherwise it is known once the model is loaded, and asking for
    it before raises `EmbeddingError` (as for an endpoint not yet called). With `spinning`,
    the runtime's threads spin within a run instead of sleeping (see the note on spinning).
    """

    def __init__(
        self,
        name: str,
        source: Callable[[], OnnxModel],
        *,
        dim: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        spinning: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.spinning = spinning
        self._name = name
        self._source = source
        self._dim = dim
        self._batch_size = batch_size
        self._model: OnnxModel | None = None
        self._loaded = False

    @property
    def model(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise EmbeddingError(f"the dimension of {self._name} is known once it is loaded")
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._loaded

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first `embed`."""
        await asyncio.to_thread(self._runtime)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        items = check_texts(texts)
        if not items:
            if self._dim is None:
                await self.load()
            return empty(self.dim)
        return await asyncio.to_thread(self._encode, items)

    async def aclose(self) -> None:
        return None  # the session stays cached for the process; there is nothing to release

    def _runtime(self) -> Runtime:
        if self._model is None:
            self._model = self._source()
        runtime = self._load_runtime(self._model)
        if self._dim is None:
            self._dim = runtime.dim
        elif runtime.dim != self._dim:
            raise EmbeddingError(
                f"the model {self._name} has dimension {runtime.dim}, expected {self._dim}"
            )
        self._loaded = True
        return runtime

    def _load_runtime(self, model: OnnxModel) -> Runtime:
        """The loaded `model` (a subclass may fall back to another)."""
        return load(model, self.spinning)

    def _encode(self, texts: list[str]) -> Vectors:
        return encode_sorted(self._runtime(), texts, self._batch_size)


def model_in_directory(folder: Path) -> OnnxModel:
    """The ONNX sentence encoder in `folder`: `model.onnx` (or `onnx/model.onnx`, as exporters
    lay it out) and `tokenizer.json`; texts cut at `max_seq_length` of a
    `sentence_bert_config.json` there, else at 512 tokens."""
    graph = next((p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx")
                  if p.is_file()), None)  # fmt: skip
    if graph is None:
        raise EmbeddingError(f"no model.onnx in {folder} (nor in {folder / 'onnx'})")
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise EmbeddingError(f"no tokenizer.json in {folder}")
    return OnnxModel(graph, tokenizer, max_tokens_in(folder / "sentence_bert_config.json"))


def max_tokens_in(config: Path) -> int:
    """`max_seq_length` of a sentence-transformers config file, 512 when there is none."""
    if not config.is_file():
        return _DIRECTORY_MAX_TOKENS
    try:
        return int(json.loads(config.read_text(encoding="utf-8"))["max_seq_length"])
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise EmbeddingError(f"cannot read max_seq_length from {config}: {e!r}") from e
