"""Queries into FTS5 expressions: content words, and adjacent pairs as phrases."""

from __future__ import annotations

from stratamem.store.core.fts_query import phrase_terms, query_terms, terms_expression


def test_query_terms_are_distinct_content_words_in_order() -> None:
    assert query_terms("What did Jon say about the grand opening, Jon?") == [
        "jon", "say", "grand", "opening",
    ]  # fmt: skip


def test_phrases_are_adjacent_content_words_only() -> None:
    query = "What did Gina say to Jon about the grand opening of his dance-studio, ice cream?"
    assert phrase_terms(query) == ["gina say", "grand opening", "dance studio", "ice cream"]


def test_words_across_punctuation_are_not_a_phrase() -> None:
    assert phrase_terms("turtles, tank water; coconut. milk") == ["tank water"]


def test_phrases_are_capped() -> None:
    assert len(phrase_terms(" ".join(f"word{i}" for i in range(100)), max_phrases=5)) == 5


def test_a_phrase_is_quoted_as_one_term() -> None:
    assert terms_expression(["grand opening", 'say "hi"']) == '"grand opening" OR "say ""hi"""'
