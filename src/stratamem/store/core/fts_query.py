"""Turn free text into a safe FTS5 MATCH expression (terms quoted, OR-joined)."""

from __future__ import annotations

import re
from itertools import pairwise

_WORD = re.compile(r"\w+", re.UNICODE)
_ADJACENT = re.compile(r"[ \t]+|[ \t]*-[ \t]*")

# Function words that only add cost to an OR query; BM25 would weigh them near zero anyway.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "don",
        "ll",
        "ve",
        "re",
        "d",
        "m",
        "o",
        "y",
    ]
)


def query_terms(text: str, max_terms: int = 32) -> list[str]:
    """Distinct lower-cased content words of `text`, in order, at most `max_terms`."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS or word in seen:
            continue
        seen[word] = None
        if len(seen) >= max_terms:
            break
    if not seen:  # a query made only of stop words still deserves an answer
        for word in _WORD.findall(text.lower())[:max_terms]:
            seen[word] = None
    return list(seen)


def phrase_terms(text: str, max_phrases: int = 16) -> list[str]:
    """Distinct pairs of content words adjacent in `text` ("grand opening", "ice cream").

    Words count as adjacent when only spaces or a hyphen separate them. Searched as phrases
    beside the single words, they rank a text that has the words together above one that has
    them apart, and a rare pair weighs as much as a rare word.
    """
    words = [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)]
    pairs: dict[str, None] = {}
    for (first, _, end), (second, start, _) in pairwise(words):
        if first in STOPWORDS or second in STOPWORDS or not _ADJACENT.fullmatch(text[end:start]):
            continue
        pairs[f"{first} {second}"] = None
        if len(pairs) >= max_phrases:
            break
    return list(pairs)


def terms_expression(terms: list[str]) -> str | None:
    """Quoted terms OR-joined (FTS5 syntax in the words is never interpreted; a term of several
    words is a phrase), or None."""
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
