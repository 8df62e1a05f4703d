"""The SQLite full-text index's own tokenizer, for the PostgreSQL text index.

Both stores must cut text into the same terms to rank alike, so the PostgreSQL store runs FTS5's
tokenizer (`porter unicode61 remove_diacritics 2`, as `store/sqlite/migrations.py`) on a private
in-memory SQLite database and reads the tokens back through an `fts5vocab` table. Nothing is
kept there: each call inserts its texts and rolls back.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

TOKENIZER = "porter unicode61 remove_diacritics 2"
MAX_COLUMNS = 5


class Tokenizer:
    """Thread-safe; one per store."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        columns = ", ".join(f"c{i}" for i in range(MAX_COLUMNS))
        self._conn.execute(f"CREATE VIRTUAL TABLE t USING fts5 ({columns}, tokenize='{TOKENIZER}')")
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def tokens(self, docs: Sequence[Sequence[str | None]]) -> list[list[list[str]]]:
        """For each document (its columns' texts, at most `MAX_COLUMNS`), each column's tokens
        in order."""
        found: list[list[list[str]]] = [[[] for _ in doc] for doc in docs]
        if not docs:
            return found
        rows = [(i + 1, *doc, *([None] * (MAX_COLUMNS - len(doc)))) for i, doc in enumerate(docs)]
        marks = ", ".join("?" for _ in range(MAX_COLUMNS + 1))
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany(f"INSERT INTO t VALUES ({marks})".replace(
                    "INSERT INTO t VALUES", "INSERT INTO t (rowid, c0, c1, c2, c3, c4) VALUES"
                ), rows)  # fmt: skip
                instances = self._conn.execute(
                    "SELECT term, doc, col FROM v ORDER BY doc, col, offset"
                ).fetchall()
            finally:
                self._conn.execute("ROLLBACK")
        for term, doc, col in instances:
            found[doc - 1][int(col[1:])].append(term)
        return found

    def query_tokens(self, terms: Sequence[str]) -> list[list[str]]:
        """The tokens of each query term (a quoted FTS5 phrase: one token, or several)."""
        return [doc[0] for doc in self.tokens([(term,) for term in terms])]
