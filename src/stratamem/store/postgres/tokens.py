"""The SQLite full-text index's own tokenizer, for the PostgreSQL text index.

Both stores must cut text into the same terms to rank alike, so the PostgreSQL store runs FTS5's
tokenizer (`porter unicode61 remove_diacritics 2`, as `store/sqlite/migrations.py`) on a private
in-memory SQLite database and reads the tokens back through an `fts5vocab` table. Nothing is
kept there: each call inserts its texts and rolls back.

Each text's tokens are kept (`CACHED_TEXTS`, least recently used out): a turn's text is a field
of the next turns too (their context, their `around`), so a capture asked for the same texts
again; a call cost about 0.13 ms plus 0.08 ms per turn, most of a capture's indexing (issue 32).
Columns are tokenized one by one, so a text's tokens do not depend on the document it is in.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence

TOKENIZER = "porter unicode61 remove_diacritics 2"
MAX_COLUMNS = 5
#: Texts whose tokens are kept, and the longest kept (a long text is seldom asked for again).
CACHED_TEXTS = 4096
CACHED_CHARS_MAX = 4096


class Tokenizer:
    """Thread-safe; one per store."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        columns = ", ".join(f"c{i}" for i in range(MAX_COLUMNS))
        self._conn.execute(f"CREATE VIRTUAL TABLE t USING fts5 ({columns}, tokenize='{TOKENIZER}')")
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, list[str]] = OrderedDict()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def tokens(self, docs: Sequence[Sequence[str | None]]) -> list[list[list[str]]]:
        """For each document (its columns' texts, at most `MAX_COLUMNS`), each column's tokens
        in order."""
        with self._lock:
            cache = self._cache
            wanted = list({text for doc in docs for text in doc if text and text not in cache})
            found = dict(zip(wanted, self._tokenized(wanted), strict=True))
            for text in wanted:
                if len(text) <= CACHED_CHARS_MAX:
                    self._cache[text] = found[text]
            while len(self._cache) > CACHED_TEXTS:
                self._cache.popitem(last=False)
            return [[list(self._known(text, found)) for text in doc] for doc in docs]

    def _known(self, text: str | None, found: dict[str, list[str]]) -> list[str]:
        if not text:
            return []
        tokens = found.get(text)
        if tokens is None:
            tokens = self._cache[text]
            self._cache.move_to_end(text)
        return tokens

    def _tokenized(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's tokens, by FTS5 (one document a text; under the lock)."""
        found: list[list[str]] = [[] for _ in texts]
        if not texts:
            return found
        rows = [(i + 1, text) for i, text in enumerate(texts)]
        self._conn.execute("BEGIN")
        try:
            self._conn.executemany("INSERT INTO t (rowid, c0) VALUES (?, ?)", rows)
            instances = self._conn.execute(
                "SELECT term, doc FROM v ORDER BY doc, offset"
            ).fetchall()
        finally:
            self._conn.execute("ROLLBACK")
        for term, doc in instances:
            found[doc - 1].append(term)
        return found

    def query_tokens(self, terms: Sequence[str]) -> list[list[str]]:
        """The tokens of each query term (a quoted FTS5 phrase: one token, or several)."""
        return [doc[0] for doc in self.tokens([(term,) for term in terms])]
