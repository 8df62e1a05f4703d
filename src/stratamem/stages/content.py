"""The minimum-content rule: text a model writes into memory must say something.

A text passes when it has at least `min_words` word units and at least one letter. A word unit
is a run of letters, digits and combining marks in a script that separates words by spaces
(Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Hangul …); in scripts written without
spaces (Chinese, Japanese kana, Thai, Lao, Khmer, Myanmar) every character counts half a unit,
a word there averaging about two characters. Punctuation, symbols and emoji count for nothing.

With two units, "", "...", "Paris!", "2023" and "巴黎" fail; "Jon dances", "Maria is
vegetarian" and "玛丽吃素" pass. The rule refuses empty and one-word answers in any language;
it does not judge whether a memory is true or useful.
"""

from __future__ import annotations

import unicodedata

_UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
)
_EXCERPT_CHARS = 60


def _unspaced(char: str) -> bool:
    point = ord(char)
    return any(low <= point <= high for low, high in _UNSPACED)


def word_units(text: str) -> float:
    """How many words `text` holds, by the rule of the module doc."""
    units = 0.0
    in_word = False
    for char in text:
        if _unspaced(char):
            units += 0.5
            in_word = False
        elif unicodedata.category(char)[0] in "LNM":
            units += 0 if in_word else 1
            in_word = True
        else:
            in_word = False
    return units


def content_problem(text: str, min_words: int, what: str) -> str | None:
    """Why `text` fails the minimum-content rule, or None when it passes."""
    has_letter = any(unicodedata.category(char)[0] == "L" for char in text)
    if has_letter and word_units(text) >= min_words:
        return None
    shown = " ".join(text.split())[:_EXCERPT_CHARS]
    plural = "word" if min_words == 1 else "words"
    return f"{what} {shown!r} says too little (at least {min_words} {plural})"
