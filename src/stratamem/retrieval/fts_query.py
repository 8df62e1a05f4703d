"""Turn free text into a safe FTS5 MATCH expression (terms quoted, OR-joined)."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)

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


def match_expression(text: str) -> str | None:
    """An FTS5 expression matching any term of `text`, or None when it has no words."""
    return terms_expression(query_terms(text))


def terms_expression(terms: list[str]) -> str | None:
    """Quoted terms OR-joined (FTS5 syntax in the words is never interpreted), or None."""
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
