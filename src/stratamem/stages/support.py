"""The support checks: a memory a model proposes must be said by the turns it cites.

An id that was shown is not proof that its turn says the memory. After the id checks, each
proposed memory is checked against the turns it cites, cheaply and locally (no model call):
- **markup**: JSON, XML/HTML tags, code fences or our own turn aliases (`T1`, `B12:T3`) that the
  cited turns do not contain themselves are refused (a fragment of a reply is not a memory);
- **copied from the prompt**: text whose word sequence comes from the stage's own instructions
  or examples (`stratamem/prompts/*.md`), and not from the cited turns, is refused;
- **whose turn**: a memory must cite a user's turn, or an assistant's turn that the user
  confirmed in the next turn ("yes", "right" …); an assistant's suggestion is not the user's fact;
- **a fact**: a memory of nothing but names and function words ("Tomás (user)") is refused;
- **support**: enough of the memory's content words (names included; dates, numbers and function
  words aside) appear in the cited turns (or are a cited speaker's name), compared by a light
  stem; `min_support` is the share that must, measured on LoCoMo (docs in the grounding note).

`support_problem` answers why a memory is refused, or None. `event_time` is where an episodic
memory's time comes from: the date the model resolved when a cited turn gives reason for it
(a date, a weekday, a relative word), else the earliest cited turn's time.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from stratamem.domain import Role, Turn
from stratamem.stages.content import _unspaced

#: The least share of a memory's content words its cited turns must hold.
MIN_SUPPORT = 0.25
_SHINGLE = 3
_PROMPT_SHARE = 0.6
_STEM_PREFIX = 5
_DAY_S = 86_400.0

_SUFFIXES = ("'s", "ness", "ment", "ies", "ing", "ed", "es", "ly", "s")
_WORD = re.compile(r"\w+", re.UNICODE)
_MARKUP = re.compile(
    r"""[{}]|"\s*:|":|\\[nt"]|</?[A-Za-z][\w-]*(\s[^<>]*)?/?>|```|\[[TBMSNE]\d+\]|\b[TBMSNE]\d+:[TB]\d+\b|\b[BT]\d{3,}\b""",
)
_CONFIRM = re.compile(
    r"^\W*(yes|yeah|yep|yup|right|exactly|correct|indeed|true|sure|absolutely|definitely|"
    r"that'?s (right|true|correct|it)|you'?re right|oui|ja|sí|si)\b",
    re.IGNORECASE,
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TIME_WORDS = _words(
    "yesterday today tonight tomorrow ago last next this coming past previous week weeks "
    "weekend month months year years day days morning afternoon evening night earlier later "
    "soon recently monday tuesday wednesday thursday friday saturday sunday mon tue wed thu "
    "fri sat sun january february march april may june july august september october "
    "november december jan feb mar apr jun jul aug sep sept oct nov dec christmas easter "
    "birthday since before after when then"
)
_STOP = _words(
    "a an the and or but nor so of to in on at by for with from into onto about as than that "
    "this these those there here is are was were be been being am do does did done doing "
    "have has had having will would shall should can could may might must not no yes it its "
    "it's he she they them their theirs his her hers him we us our ours you your yours i me "
    "my mine myself himself herself themselves itself ourselves who whom whose which what "
    "where why how also too very just really quite some any all each every both either "
    "neither such own same other another more most less least much many few one ones user "
    "users assistant speaker person people someone something thing things like likes get "
    "gets got going go goes went make makes made said says say tell told during through "
    "while off even especially well s t re ve ll d m"
)


@dataclass(frozen=True, slots=True)
class Cited:
    """The turns a memory cites, and the turn after each (for a user's confirmation)."""

    turns: tuple[Turn, ...]
    following: tuple[Turn | None, ...] = ()
    names: frozenset[str] = frozenset()
    """Names the prompt showed (its turns' speakers): a memory may name them."""


def support_problem(
    content: str,
    cited: Cited,
    *,
    min_support: float = MIN_SUPPORT,
    prompts: Iterable[str] | None = None,
) -> str | None:
    """Why `content` is not supported by the turns it cites (see the module doc), or None."""
    said = " ".join(t.text for t in cited.turns)
    fragment = _markup_not_said(content, said)
    if fragment is not None:
        return f"looks like markup or JSON ({fragment!r}), not a memory"
    grounds = _grounding_turns(cited)
    if not grounds:
        roles = sorted({t.role.value for t in cited.turns})
        return (
            f"cites only {'/'.join(roles)} turns: a memory must cite the user's own turn"
            " (or an assistant's turn the user confirmed)"
        )
    if _only_names(content, grounds, cited.names):
        return "says nothing but a name (no fact, number or time in it): not a memory"
    copied = _copied_from_prompt(content, said, prompts)
    if copied:
        return f"copies the prompt's own text ({copied!r}), which the cited turns do not say"
    share, missing = support_share(content, grounds, cited.names)
    if share < min_support:
        shown = ", ".join(missing[:6])
        return (
            f"not supported by the cited turns: {share:.0%} of its content words are in them"
            f" (at least {min_support:.0%}); not said there: {shown}"
        )
    return None


def support_share(
    content: str, turns: Sequence[Turn], names: Iterable[str] = ()
) -> tuple[float, list[str]]:
    """The share of `content`'s content words found in `turns`, and the words that were not.
    The names of the turns' speakers and of `names` (people the prompt showed) count neither
    way: naming the user says nothing of what they said. A text with no other content words
    counts as fully supported (the minimum-content rule is a separate check)."""
    known = _known_names(turns, names)
    words = [w for w in content_words(content) if w not in known]
    if not words:
        return 1.0, []
    said = {stem for turn in turns for stem in _stems(turn.text)}
    prefixes = {w[:_STEM_PREFIX] for w in said if len(w) >= _STEM_PREFIX + 1}
    missing = [w for w in words if not _found(w, said, prefixes)]
    return 1 - len(missing) / len(words), missing


def content_words(text: str) -> list[str]:
    """The stems of `text`'s words that carry content: no function or time words, no numbers."""
    return list(dict.fromkeys(_stems(" ".join(w for w in _WORD.findall(text)
                                              if _content(w.lower())))))  # fmt: skip


def event_time(resolved: float | None, turns: Sequence[Turn]) -> float | None:
    """An episodic memory's time: the model's date when a cited turn gives reason for it (it
    names a time, or the date is the turn's own day), else the earliest cited turn's time."""
    if not turns:
        return resolved
    earliest = min(t.timestamp for t in turns)
    if resolved is None:
        return earliest
    if any(_same_day(resolved, t.timestamp) for t in turns):
        return resolved
    if any(_names_a_time(t.text) for t in turns):
        return resolved
    return earliest


def prompt_texts() -> tuple[str, ...]:
    """The text of every prompt shipped with stratamem (instructions and examples)."""
    return _prompt_texts()


@cache
def _prompt_texts() -> tuple[str, ...]:
    folder = resources.files("stratamem") / "prompts"
    return tuple(
        entry.read_text(encoding="utf-8")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".md")
    )


@cache
def _prompt_shingles() -> frozenset[tuple[str, ...]]:
    return frozenset(s for text in _prompt_texts() for s in _shingles(_plain_words(text)))


def _grounding_turns(cited: Cited) -> list[Turn]:
    """The cited turns that can ground a fact about the user: the user's own, and an
    assistant's that the next turn, the user's, confirms (with that confirmation)."""
    grounds: list[Turn] = []
    following = cited.following or (None,) * len(cited.turns)
    for turn, after in zip(cited.turns, following, strict=False):
        if turn.role is Role.USER:
            grounds.append(turn)
        elif after is not None and after.role is Role.USER and _CONFIRM.search(after.text):
            grounds += [turn, after]
    return grounds


def _only_names(content: str, turns: Sequence[Turn], names: Iterable[str]) -> bool:
    """Whether `content` holds no word but people's names and function words, and no number or
    time: "Tomás (user)" names someone and says nothing of them."""
    if _names_a_time(content):
        return False
    known = _known_names(turns, names)
    return all(word in known for word in content_words(content))


def _known_names(turns: Sequence[Turn], names: Iterable[str]) -> set[str]:
    """The stems of the people a memory may name: `names` (the prompt showed them) and the
    speakers of `turns`."""
    known = {stem for name in names for stem in _stems(name)}
    known.update(stem for turn in turns for stem in _stems(turn.speaker or ""))
    return known


def _markup_not_said(content: str, said: str) -> str | None:
    for found in _MARKUP.finditer(content):
        if found.group(0) not in said:
            return found.group(0)
    return None


def _copied_from_prompt(content: str, said: str, prompts: Iterable[str] | None) -> str | None:
    words = _plain_words(content)
    if len(words) < 2:
        return None
    mine = _shingles(words)
    pool = _prompt_shingles() if prompts is None else frozenset(
        s for text in prompts for s in _shingles(_plain_words(text))
    )  # fmt: skip
    from_prompt = [s for s in mine if s in pool]
    if len(from_prompt) < _PROMPT_SHARE * len(mine):
        return None
    theirs = _shingles(_plain_words(said))
    if sum(s in theirs for s in from_prompt) >= _PROMPT_SHARE * len(from_prompt):
        return None
    return " ".join(words)[:80]


def _plain_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _shingles(words: Sequence[str]) -> list[tuple[str, ...]]:
    size = min(_SHINGLE, len(words))
    return [tuple(words[i : i + size]) for i in range(len(words) - size + 1)] if words else []


def _stems(text: str) -> list[str]:
    stems: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text)):
        if any(_unspaced(c) for c in word):  # scripts without spaces: character bigrams
            chars = [c for c in word if not c.isspace()]
            stems += ["".join(chars[i : i + 2]) for i in range(max(1, len(chars) - 1))]
        else:
            stems.append(_stem(word.lower()))
    return stems


def _stem(word: str) -> str:
    """A light English stem: "making", "makes", "make" → "mak"; "families", "family" →
    "famili". Other languages keep their words (equal words still match)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if word.endswith("y") and len(word) > 3:
        return word[:-1] + "i"
    if word.endswith("e") and len(word) > 3:
        return word[:-1]
    return word


def _content(word: str) -> bool:
    if word in _STOP or word in _TIME_WORDS or len(word) < 2:
        return False
    return not any(c.isdigit() for c in word)


def _found(word: str, said: set[str], prefixes: set[str]) -> bool:
    if word in said:
        return True
    return len(word) >= _STEM_PREFIX + 1 and word[:_STEM_PREFIX] in prefixes


def _same_day(moment: float, other: float) -> bool:
    return int(moment // _DAY_S) == int(other // _DAY_S)


def _names_a_time(text: str) -> bool:
    words = _plain_words(text)
    return any(w in _TIME_WORDS or any(c.isdigit() for c in w) for w in words)
