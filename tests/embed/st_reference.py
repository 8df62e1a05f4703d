"""The sentence-transformers vectors the ONNX local embedder is checked against, for texts of our
own (no data set's text): `python -m tests.embed.st_reference` writes them to
`tests/data/minilm_st_reference.npz` (needs the `st` extra); `test_local_onnx.py` checks the
ONNX vectors against that file, and, where sentence-transformers is installed, the file
against sentence-transformers itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "minilm_st_reference.npz"
TEXTS = [
    "The user prefers green tea over coffee.",
    "We moved to Lisbon in March 2023.",
    "Always answer in French.",
    "",
    "   ",
    "Ünïcödé ✓ — 東京で寿司を食べた",
    "I adopted a puppy last week; her name is Biscuit 🐶!",
    "Can you remind me when the town hall appointment is? I think it was 10:30 on the 4th.",
    "ACRONYMS like NASA, URLs like https://example.org/a?b=c and e-mail a.b@example.com",
    "naïve café résumé coöperate Straße",
    "a much longer text " * 40,
    " ".join(f"word{i} and some filler about gardening" for i in range(120)),  # > 256 tokens
]


def st_vectors() -> npt.NDArray[np.float32]:
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415

    from stratamem.embed.local import package_model_dir  # noqa: PLC0415

    model = SentenceTransformer(str(package_model_dir()), device="cpu")
    rows = model.encode(TEXTS, batch_size=4, convert_to_numpy=True, normalize_embeddings=True)
    return np.asarray(rows, dtype=np.float32)


def main() -> None:
    np.savez_compressed(REFERENCE, texts=np.array(TEXTS), vectors=st_vectors())
    print(f"wrote {REFERENCE}")


if __name__ == "__main__":
    main()
