"""Migration: each turn is full-text indexed with its neighbours and its date.

A reply is often found by the words of the question it answers ("Any tips for getting
started?" → "Do your research and find an agency…"), and a question often names a month ("in
May 2023"). So the turns' index gets three more columns beside `text` and `speaker`:
- `context`: the previous turn of the session;
- `around`: the turn before that and the next turn (the next one is added when it arrives);
- `dated`: the turn's date in words ("8 May 2023", UTC).
`ranking()` ranks a match in the turn's own words above one in its neighbours'. Measured on
LoCoMo (docs in `stratamem eval locomo`): recall@10 of evidence turns 0.61 → 0.75, BM25 alone.

The index keeps its own copy of the text (a regular FTS5 table, no longer external content),
maintained by triggers, so any writer of `turns` keeps it right. Deleting a turn leaves its
words in its neighbours' context columns until they are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable

from stratamem.store.core.port import TurnFieldWeights

#: The columns of the turns' index a query's words are matched against.
TEXT_COLUMNS = "text speaker context around dated"


def ranking(weights: TurnFieldWeights | None = None) -> str:
    """The bm25() ranking of the turns' index: its text, speaker, context, around and dated
    columns weighted by `weights` (the defaults when None), and the tenant's scope token
    weighted 0 (it only selects)."""
    w = weights or TurnFieldWeights()
    columns = (w.text, w.speaker, w.context, w.around, w.dated, 0.0)
    return "bm25(" + ", ".join(f"{float(c)!r}" for c in columns) + ")"

_MONTHS = "".join(
    f"{name:<9}"
    for name in (
        "January", "February", "March", "April", "May", "June", "July", "August",
        "September", "October", "November", "December",
    )
)


def date_words_sql(ts: str) -> str:
    """SQL for the date of epoch seconds `ts` in words, e.g. '8 May 2023' (locale-free)."""
    return (
        f"CAST(strftime('%d', {ts}, 'unixepoch') AS INTEGER) || ' ' ||"
        f" rtrim(substr('{_MONTHS}', CAST(strftime('%m', {ts}, 'unixepoch') AS INTEGER) * 9 - 8,"
        f" 9)) || ' ' || strftime('%Y', {ts}, 'unixepoch')"
    )


def neighbour_sql(alias: str, offset: int) -> str:
    return (
        f"COALESCE((SELECT n.text FROM turns n WHERE n.tenant = {alias}.tenant"
        f" AND n.session = {alias}.session AND n.seq = {alias}.seq {offset:+d}), '')"
    )


#: How a rebuilt index takes a column's text: `words(alias, expression)` → SQL.
Words = Callable[[str, str], str]


def _as_is(alias: str, expression: str) -> str:
    return expression


def turn_context_sql(tokenizer: str) -> str:
    """The migration script, with the tokenizer the other full-text indexes use."""
    return turns_index_sql(tokenizer, _as_is)


def turns_index_sql(tokenizer: str, words: Words) -> str:
    """Replace the turns' index and its triggers by one with these columns (`ranking`), filled
    from the turns: each column's text as `words` makes it (as it is, or `tenant_index.py`'s
    tenant-prefixed words)."""
    before, earlier, after = (neighbour_sql("t", n) for n in (-1, -2, 1))
    return f"""
DROP TRIGGER turns_ai;
DROP TRIGGER turns_ad;
DROP TRIGGER turns_au;
DROP TABLE turns_fts;
CREATE VIRTUAL TABLE turns_fts USING fts5 (
    text, speaker, context, around, dated, scope_token, tokenize='{tokenizer}'
);
INSERT INTO turns_fts (rowid, text, speaker, context, around, dated, scope_token)
SELECT t.rid, {words("t", "t.text")}, {words("t", "t.speaker")}, {words("t", before)},
       {words("t", f"trim({earlier} || ' ' || {after})")}, {words("t", date_words_sql("t.ts"))},
       t.scope_token
FROM turns t;
CREATE TRIGGER turns_ai AFTER INSERT ON turns BEGIN
    INSERT INTO turns_fts (rowid, text, speaker, context, around, dated, scope_token)
    VALUES (new.rid, {words("new", "new.text")}, {words("new", "new.speaker")},
            {words("new", neighbour_sql("new", -1))}, {words("new", neighbour_sql("new", -2))},
            {words("new", date_words_sql("new.ts"))}, new.scope_token);
    UPDATE turns_fts SET around = trim(around || ' ' || {words("new", "new.text")})
    WHERE rowid = (SELECT p.rid FROM turns p WHERE p.tenant = new.tenant
                   AND p.session = new.session AND p.seq = new.seq - 1);
END;
CREATE TRIGGER turns_ad AFTER DELETE ON turns BEGIN
    DELETE FROM turns_fts WHERE rowid = old.rid;
END;
CREATE TRIGGER turns_au AFTER UPDATE OF text, speaker ON turns BEGIN
    UPDATE turns_fts SET text = {words("new", "new.text")},
                         speaker = {words("new", "new.speaker")}
    WHERE rowid = new.rid;
END;
"""
