"""Migration: the full-text indexes hold tenant-prefixed words (`tenant_words.py`).

Both indexes are rebuilt as regular FTS5 tables (each keeps its own copy of the prefixed text)
and their triggers call `tenant_words()`. The turns' index keeps the columns of
`turn_context.py` (the turn, its speaker, its neighbours, its date in words); the memories'
index its content and scope. Deleting a row needs no function, only inserts and updates do.
"""

from __future__ import annotations

from stratamem.store.sqlite.turn_context import date_words_sql, neighbour_sql


def _words(alias: str, expression: str) -> str:
    return f"tenant_words({alias}.tenant, {expression})"


def tenant_index_sql(tokenizer: str) -> str:
    """The migration script, with the tokenizer the indexes use."""
    before, earlier, after = (neighbour_sql("t", n) for n in (-1, -2, 1))
    return f"""
DROP TRIGGER turns_ai;
DROP TRIGGER turns_ad;
DROP TRIGGER turns_au;
DROP TABLE turns_fts;
DROP TRIGGER memories_ai;
DROP TRIGGER memories_ad;
DROP TRIGGER memories_au;
DROP TABLE memories_fts;
CREATE VIRTUAL TABLE turns_fts USING fts5 (
    text, speaker, context, around, dated, scope_token, tokenize='{tokenizer}'
);
INSERT INTO turns_fts (rowid, text, speaker, context, around, dated, scope_token)
SELECT t.rid, {_words("t", "t.text")}, {_words("t", "t.speaker")}, {_words("t", before)},
       {_words("t", f"trim({earlier} || ' ' || {after})")}, {_words("t", date_words_sql("t.ts"))},
       t.scope_token
FROM turns t;
CREATE TRIGGER turns_ai AFTER INSERT ON turns BEGIN
    INSERT INTO turns_fts (rowid, text, speaker, context, around, dated, scope_token)
    VALUES (new.rid, {_words("new", "new.text")}, {_words("new", "new.speaker")},
            {_words("new", neighbour_sql("new", -1))}, {_words("new", neighbour_sql("new", -2))},
            {_words("new", date_words_sql("new.ts"))}, new.scope_token);
    UPDATE turns_fts SET around = trim(around || ' ' || {_words("new", "new.text")})
    WHERE rowid = (SELECT p.rid FROM turns p WHERE p.tenant = new.tenant
                   AND p.session = new.session AND p.seq = new.seq - 1);
END;
CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
    DELETE FROM turns_fts WHERE rowid = old.rid;
END;
CREATE TRIGGER turns_au AFTER UPDATE OF text, speaker ON turns BEGIN
    UPDATE turns_fts SET text = {_words("new", "new.text")},
                         speaker = {_words("new", "new.speaker")}
    WHERE rowid = new.rid;
END;
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
