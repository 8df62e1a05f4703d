"""Pseudo-relevance feedback: the words of the best hits find what shares no word with the query."""

from __future__ import annotations

from pathlib import Path

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Hit, Layer
from stratamem.retrieval.feedback import feedback_terms


def hit(text: str, speaker: str | None = "Nate") -> Hit:
    return Hit(id=text, layer=Layer.L0, text=text, session="s", score=1.0, speaker=speaker)


def test_words_come_from_the_best_hits_most_frequent_first() -> None:
    hits = [
        hit("My turtles love the tank, turtles everywhere"),
        hit("Nate said the turtles need a bigger tank in 2024"),
        hit("We watched a movie"),
        hit("Gardening tips for spring"),  # fourth: not used
    ]
    terms = feedback_terms("What pets does Nate have?", hits)
    assert terms[:2] == ["turtles", "tank"]
    assert "nate" not in terms and "2024" not in terms and "gardening" not in terms
    assert "pets" not in terms  # the query's own words are not feedback


def test_no_hits_no_words() -> None:
    assert feedback_terms("anything", []) == []


async def test_a_turn_sharing_no_word_with_the_query_is_found(tmp_path: Path) -> None:
    memory = AsyncMemory.open(Settings(data_dir=tmp_path, background_embedding=False),
                              embedder="none")
    await memory.capture("acme", "s1", [
        {"role": "user", "speaker": "Nate", "content": "My pets are three turtles in a big tank."},
        {"role": "user", "speaker": "Joanna", "content": "The weather was lovely at the lake."},
    ])
    await memory.capture("acme", "s2", [
        {"role": "user", "speaker": "Nate", "content": "The turtles got a new heat lamp today."},
        {"role": "user", "speaker": "Joanna", "content": "I finished my screenplay draft."},
    ])
    hits = await memory.search("acme", "What pets does Nate have?", k=3)
    texts = [h.text for h in hits]
    assert texts[0] == "My pets are three turtles in a big tank."
    assert "The turtles got a new heat lamp today." in texts
    found = next(h for h in hits if "heat lamp" in h.text)
    assert "L0:feedback" in found.ranks
    await memory.aclose()
