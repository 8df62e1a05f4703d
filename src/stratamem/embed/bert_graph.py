"""The ONNX graph of a BERT sentence encoder, written from its safetensors weights without torch.

The graph is what sentence-transformers runs for all-MiniLM-L6-v2: token, position and type-0
embeddings with LayerNorm; N encoder layers (multi-head self-attention over the attention mask,
then a GELU feed-forward, each with a residual and LayerNorm); the mean of the token states over
the attention mask; L2 normalisation. Inputs `input_ids` and `attention_mask` (int64, batch by
tokens); output `sentence_embedding` (float32, batch by hidden size, unit rows).

By default each layer's self-attention is onnxruntime's fused `Attention` operator (domain
`com.microsoft`: Q, K and V in one product, the heads in one kernel), which onnxruntime does not
fuse by itself from the plain operators; it costs ~13 % less CPU per query. `fused=False` writes
it with standard ONNX operators only (what the int8 quantiser is given, and any other runtime).

With `block_weights=True`, the dense layers after the attention (its output projection and the
feed-forward pair, 3/4 of the weights) are onnxruntime's `MatMulNBits`: each weight column cut
into blocks of 16 values stored as 8-bit integers with one float scale per block, and each
row of the input quantised to int8 per block of 16 at run time (`accuracy_level` 4: integer dot
products). A query reads a quarter of those weight bytes: on 2 cores one query took 2.47 ms
instead of 3.22 (p50), with vectors at cosine >= 0.9991 to the float32 ones over LoCoMo's
2,760 turns (mean 0.99987). Rows are quantised one by one, so a text's vector does not depend
on the other texts of its batch.

Needs the `onnx` package (only to build the graph; running it needs onnxruntime alone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: ONNX opset of the graph: 17 has LayerNormalization; reductions other than ReduceSum still
#: take their axes as attributes there.
OPSET = 17
IR_VERSION = 8
MICROSOFT = "com.microsoft"
"""The domain of onnxruntime's contrib operators (the fused `Attention`)."""
OUTPUT = "sentence_embedding"
TOKEN_OUTPUT = "last_hidden_state"
_MASKED = float(np.finfo(np.float32).min)
"""Added to the attention scores of padding tokens (as transformers does)."""
BLOCK = 16
"""Values per quantisation block of `block_weights` (32 gave cosine 0.9989, under 0.999)."""
_ZERO = 128
"""`MatMulNBits`' zero point for 8 bits when none is given: stored = round(w / scale) + 128."""

Weights = Mapping[str, npt.NDArray[Any]]


@dataclass(frozen=True, slots=True)
class BertShape:
    """The sizes the graph needs, from a transformers `config.json`."""

    hidden: int
    heads: int
    layers: int
    layer_norm_eps: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BertShape:
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {config['hidden_act']!r}: expected gelu")
        return cls(
            hidden=int(config["hidden_size"]),
            heads=int(config["num_attention_heads"]),
            layers=int(config["num_hidden_layers"]),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class _Graph:
    """Nodes and initialisers under construction; every op output gets a fresh name."""

    def __init__(self, weights: Weights, *, block_weights: bool = False) -> None:
        from onnx import helper, numpy_helper  # noqa: PLC0415  (only needed to build)

        self._helper, self._numpy_helper = helper, numpy_helper
        self.weights = weights
        self.block_weights = block_weights
        self.nodes: list[Any] = []
        self.initialisers: list[Any] = []
        self._names: set[str] = set()
        self._count = 0

    def const(self, name: str, value: npt.ArrayLike, dtype: type = np.float32) -> str:
        """The initialiser `name` (made on first use: a name always stands for one value)."""
        if name in self._names:
            return name
        self._names.add(name)
        array: npt.NDArray[Any] = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.initialisers.append(self._numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, *, transpose: bool = False) -> str:
        array = self.weights[name]
        return self.const(name, array.T if transpose else array)

    def op(self, op_type: str, *inputs: str, domain: str = "", **attributes: Any) -> str:
        self._count += 1
        output = f"{op_type.lower()}_{self._count}"
        node = self._helper.make_node(op_type, list(inputs), [output], domain=domain,
                                      **attributes)  # fmt: skip
        self.nodes.append(node)
        return output

    def linear(self, x: str, prefix: str) -> str:
        if self.block_weights:
            product = self._block_product(x, f"{prefix}.weight")
        else:
            product = self.op("MatMul", x, self.weight(f"{prefix}.weight", transpose=True))
        return self.op("Add", product, self.weight(f"{prefix}.bias"))

    def _block_product(self, x: str, name: str) -> str:
        """x @ W.T by `MatMulNBits` over W ([out, in], as torch stores it) in 8-bit blocks."""
        stored, scales = block_quantise(np.asarray(self.weights[name], dtype=np.float32))
        out, width = self.weights[name].shape
        return self.op("MatMulNBits", x, self.const(f"{name}.q8", stored, np.uint8),
                       self.const(f"{name}.scales", scales), domain=MICROSOFT, K=width, N=out,
                       bits=8, block_size=BLOCK, accuracy_level=4)  # fmt: skip

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        scale, bias = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=eps)


def block_quantise(weight: npt.NDArray[np.float32]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """`weight` ([out, in]) as `MatMulNBits` stores it: uint8 [out, blocks, BLOCK] and one
    float32 scale per block [out, blocks] (blocks = in / BLOCK, rounded up), symmetric: a
    block's value of largest magnitude is -128 steps of its scale (the scale takes its sign),
    so every block uses all 256 steps."""
    out, width = weight.shape
    padded = np.pad(weight, ((0, 0), (0, -width % BLOCK)))  # the last block's tail: zeros
    blocks = padded.reshape(out, padded.shape[1] // BLOCK, BLOCK)
    largest = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[..., None], axis=2)
    scales = largest[..., 0] / -128.0  # the largest |value| is stored as 0: all 256 steps used
    safe = np.where(scales != 0, scales, 1.0)[..., None]
    stored = np.clip(np.rint(blocks / safe) + _ZERO, 0, 255)
    return stored.astype(np.uint8), scales.astype(np.float32)


def strip_prefix(weights: Weights) -> dict[str, npt.NDArray[Any]]:
    """The weights named as in a bare `BertModel` (a `bert.` prefix removed)."""
    return {name.removeprefix("bert."): array for name, array in weights.items()}


def build_encoder(
    weights: Weights,
    shape: BertShape,
    *,
    pooled: bool = True,
    fused: bool = True,
    block_weights: bool = False,
) -> Any:
    """The `onnx.ModelProto` of the sentence encoder with these weights; with `pooled=False`,
    the encoder alone (output `last_hidden_state`, one vector per token, as exporters write);
    with `fused=False`, standard ONNX operators only; with `block_weights`, the dense layers in
    8-bit blocks (see the module's notes; needs `fused`)."""
    from onnx import TensorProto, helper  # noqa: PLC0415  (only needed to build)

    if block_weights and not fused:
        raise ValueError("block_weights uses onnxruntime's operators: it needs fused=True")
    graph = _Graph(strip_prefix(weights), block_weights=block_weights)
    hidden = _embeddings(graph, shape)
    attend = _fused_attention if fused else _self_attention
    mask = graph.op("Cast", "attention_mask", to=6) if fused else _attention_bias(graph)  # INT32
    for index in range(shape.layers):
        prefix = f"encoder.layer.{index}"
        attended = attend(graph, prefix, hidden, mask, shape)
        hidden = _encoder_layer(graph, prefix, hidden, attended, shape)
    tokens: list[str | int] = ["batch", "tokens"]
    out_shape: list[str | int]
    if pooled:
        name, out_shape, out = OUTPUT, ["batch", shape.hidden], _pool(graph, hidden)
    else:
        name, out_shape, out = TOKEN_OUTPUT, [*tokens, shape.hidden], hidden
    graph.nodes.append(helper.make_node("Identity", [out], [name]))
    body = helper.make_graph(
        graph.nodes,
        "sentence_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, tokens),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, tokens),
        ],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, out_shape)],
        graph.initialisers,
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if fused:
        opsets.append(helper.make_opsetid(MICROSOFT, 1))
    return helper.make_model(
        body,
        opset_imports=opsets,
        ir_version=IR_VERSION,
        producer_name="stratamem",
    )


def _embeddings(graph: _Graph, shape: BertShape) -> str:
    """Token + position + type-0 embeddings, then LayerNorm: [batch, tokens, hidden]."""
    words = graph.op("Gather", graph.weight("embeddings.word_embeddings.weight"), "input_ids")
    types = graph.weights["embeddings.token_type_embeddings.weight"]
    typed = graph.op("Add", words, graph.const("token_type_0", types[0]))
    length = graph.op("Shape", "input_ids", start=1, end=2)
    table = graph.weight("embeddings.position_embeddings.weight")
    zero = graph.const("zero", [0], np.int64)
    positions = graph.op("Slice", table, zero, length, zero)
    summed = graph.op("Add", typed, positions)
    return graph.layer_norm(summed, "embeddings.LayerNorm", shape.layer_norm_eps)


def _attention_bias(graph: _Graph) -> str:
    """0 for real tokens and a huge negative for padding: [batch, 1, 1, tokens]."""
    mask = graph.op("Cast", "attention_mask", to=1)  # 1: FLOAT
    padding = graph.op("Sub", graph.const("one", 1.0), mask)
    bias = graph.op("Mul", padding, graph.const("masked", _MASKED))
    return graph.op("Unsqueeze", bias, graph.const("axes_1_2", [1, 2], np.int64))


def _encoder_layer(graph: _Graph, prefix: str, x: str, attended: str, shape: BertShape) -> str:
    """The rest of a layer after its self-attention `attended` of `x`."""
    eps = shape.layer_norm_eps
    attended = graph.linear(attended, f"{prefix}.attention.output.dense")
    x = graph.layer_norm(graph.op("Add", attended, x), f"{prefix}.attention.output.LayerNorm", eps)
    inner = _gelu(graph, graph.linear(x, f"{prefix}.intermediate.dense"))
    out = graph.linear(inner, f"{prefix}.output.dense")
    return graph.layer_norm(graph.op("Add", out, x), f"{prefix}.output.LayerNorm", eps)


def _self_attention(graph: _Graph, prefix: str, x: str, bias: str, shape: BertShape) -> str:
    """Scaled dot-product attention over `heads` heads: [batch, tokens, hidden]."""
    split = graph.const(f"{prefix}.split", [0, 0, shape.heads, shape.head_dim], np.int64)

    def heads(name: str, perm: list[int]) -> str:
        projected = graph.linear(x, f"{prefix}.attention.self.{name}")
        return graph.op("Transpose", graph.op("Reshape", projected, split), perm=perm)

    query = heads("query", [0, 2, 1, 3])  # [batch, heads, tokens, head_dim]
    key = heads("key", [0, 2, 3, 1])  # [batch, heads, head_dim, tokens]
    value = heads("value", [0, 2, 1, 3])
    scale = graph.const(f"{prefix}.scale", math.sqrt(shape.head_dim))
    scores = graph.op("Div", graph.op("MatMul", query, key), scale)
    weights = graph.op("Softmax", graph.op("Add", scores, bias), axis=-1)
    context = graph.op("Transpose", graph.op("MatMul", weights, value), perm=[0, 2, 1, 3])
    merged = graph.const(f"{prefix}.merge", [0, 0, shape.hidden], np.int64)
    return graph.op("Reshape", context, merged)


def _fused_attention(graph: _Graph, prefix: str, x: str, mask: str, shape: BertShape) -> str:
    """The same attention as onnxruntime's `Attention` operator over the int32 `mask`: Q, K and
    V projected by one packed [hidden, 3 * hidden] product. Padding is masked with -10000
    before the softmax (not float32's minimum): exp(-10000) is 0 in float32 all the same."""
    names = [f"{prefix}.attention.self.{name}" for name in ("query", "key", "value")]
    packed = np.concatenate([graph.weights[f"{name}.weight"].T for name in names], axis=1)
    bias = np.concatenate([graph.weights[f"{name}.bias"] for name in names])
    return graph.op("Attention", x, graph.const(f"{prefix}.qkv.weight", packed),
                    graph.const(f"{prefix}.qkv.bias", bias), mask, domain=MICROSOFT,
                    num_heads=shape.heads)  # fmt: skip


def _gelu(graph: _Graph, x: str) -> str:
    """The exact GELU: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = graph.op("Erf", graph.op("Div", x, graph.const("sqrt2", math.sqrt(2.0))))
    return graph.op("Mul", graph.op("Mul", x, graph.const("half", 0.5)),
                    graph.op("Add", erf, graph.const("one", 1.0)))  # fmt: skip


def _pool(graph: _Graph, hidden: str) -> str:
    """The mean of the token states over the attention mask, L2-normalised: [batch, hidden]."""
    mask = graph.op("Unsqueeze", graph.op("Cast", "attention_mask", to=1),
                    graph.const("axes_2", [2], np.int64))  # fmt: skip
    token_axis = graph.const("axes_1", [1], np.int64)
    summed = graph.op("ReduceSum", graph.op("Mul", hidden, mask), token_axis, keepdims=0)
    counts = graph.op("ReduceSum", mask, token_axis, keepdims=0)
    mean = graph.op("Div", summed, graph.op("Max", counts, graph.const("tiny_count", 1e-9)))
    norm = graph.op("ReduceL2", mean, axes=[1], keepdims=1)
    return graph.op("Div", mean, graph.op("Max", norm, graph.const("tiny_norm", 1e-12)))
