"""Migration: the full-text indexes hold tenant-prefixed words (`tenant_words.py`).

Both indexes are rebuilt as regular FTS5 tables (each keeps its own copy of the prefixed text)
and their triggers call `tenant_words()`. The turns' index keeps the columns of
`turn_context.py` (the turn, its speaker, its neighbours, its date in words); the memories'
index its content and scope. Deleting a row needs no function, only inserts and updates do.
"""

from __future__ import annotations

from stratamem.store.sqlite.turn_context import turns_index_sql


def _words(alias: str, expression: str) -> str:
    return f"tenant_words({alias}.tenant, {expression})"


def tenant_index_sql(tokenizer: str) -> str:
    """The migration script, with the tokenizer the indexes use."""
    return turns_index_sql(tokenizer, _words) + f"""
DROP TRIGGER memories_ai;
DROP TRIGGER memories_ad;
DROP TRIGGER memories_au;
DROP TABLE memories_fts;
CREATE VIRTUAL TABLE memories_fts USING fts5 (content, fts_scope, tokenize='{tokenizer}');
INSERT INTO memories_fts (rowid, content, fts_scope)
SELECT m.rid, {_words("m", "m.content")}, m.fts_scope FROM memories m;
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content, fts_scope)
    VALUES (new.rid, {_words("new", "new.content")}, new.fts_scope);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.rid;
END;
CREATE TRIGGER memories_au AFTER UPDATE OF content, fts_scope ON memories BEGIN
    UPDATE memories_fts SET content = {_words("new", "new.content")}, fts_scope = new.fts_scope
    WHERE rowid = new.rid;
END;
"""
