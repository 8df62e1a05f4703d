"""What is embedded for a record: a turn's sentences, a memory whole."""

from __future__ import annotations

import numpy as np
import pytest

from stratamem.domain import Layer
from stratamem.errors import StoreError
from stratamem.store.core.pieces import MAX_PIECES, embedding_pieces, sentences, vector_blobs


def test_sentences_split_at_end_marks_and_line_breaks() -> None:
    text = "We went to Chicago! It was loud.\nLoved it?  Yes... really. 3.5 stars"
    assert sentences(text) == [
        "We went to Chicago!", "It was loud.", "Loved it?", "Yes...", "really.", "3.5 stars",
    ]  # fmt: skip


def test_fragments_without_two_letters_or_digits_are_dropped() -> None:
    assert sentences("Wow! ! :) Great. A.") == ["Wow!", ":) Great."]


def test_a_turn_is_one_piece_per_sentence_with_its_speaker() -> None:
    pieces = embedding_pieces(Layer.L0, "Hi! I adopted a dog. [shares a photo: a puppy]", "Ann")
    assert pieces == ("Ann: Hi!", "Ann: I adopted a dog.", "Ann: [shares a photo: a puppy]")


def test_a_one_sentence_turn_and_a_memory_are_embedded_whole() -> None:
    assert embedding_pieces(Layer.L0, "ok :)", "Ann") == ("Ann: ok :)",)
    assert embedding_pieces(Layer.L0, "No speaker here. Two sentences.", None) == (
        "No speaker here.",
        "Two sentences.",
    )
    memory = "Ann adopted a dog. She named it Rex."
    assert embedding_pieces(Layer.L1, memory, None) == (memory,)


def test_a_long_text_is_grouped_into_at_most_max_pieces() -> None:
    text = " ".join(f"Sentence number {i}." for i in range(100))
    pieces = embedding_pieces(Layer.L0, text, "Ann")
    assert len(pieces) == MAX_PIECES - 1 or len(pieces) == MAX_PIECES
    assert "".join(p.removeprefix("Ann: ") for p in pieces).replace(" ", "") == text.replace(
        " ", ""
    )


def test_vector_blobs_cut_consecutive_rows_per_item() -> None:
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    blobs = vector_blobs(3, rows, [1, 3, 2])
    assert [np.frombuffer(b, dtype=np.float32).tolist() for b in blobs] == [
        [0, 1], [2, 3, 4, 5, 6, 7], [8, 9, 10, 11],
    ]  # fmt: skip
    assert len(vector_blobs(6, rows)) == 6


@pytest.mark.parametrize("counts", [[1, 1], [4, 2, 0], [7]])
def test_vector_blobs_refuse_counts_that_do_not_match(counts: list[int]) -> None:
    with pytest.raises(StoreError):
        vector_blobs(len(counts), np.zeros((6, 2), dtype=np.float32), counts)
