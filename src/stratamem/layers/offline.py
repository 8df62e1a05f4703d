"""The offline mode: deterministic L1, L2 and L3 when no LLM endpoint is configured.

- L1: each user turn is split into statements; questions, greetings and fragments are dropped;
  each statement is attributed to its speaker ("Maria: I moved to Lisbon") and gets a type from
  cue words and an activity date from relative dates resolved against the turn time.
- L2: one extractive scene per memory type, its body the newest memories that fit.
- L3: the profile lists the highest-priority persona memories and the standing instructions.
Everything they make carries `Mode.OFFLINE`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from stratamem.domain import MemoryRecord, MemoryType, Role, Turn
from stratamem.layers.model import NewMemory
from stratamem.layers.offline_dates import resolve_relative_date
from stratamem.layers.views import day

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_MIN_WORDS = 3
_SMALL_TALK = re.compile(
    r"^(hi|hello|hey|thanks|thank you|ok|okay|sure|bye|good (morning|night|evening))\b",
    re.IGNORECASE,
)
_FILLER = re.compile(r"^((and|but|also|so|oh|well|ok|okay|plus)\b[\s,]*)+", re.IGNORECASE)
_INSTRUCTION = re.compile(
    r"^(please|always|never|don'?t|do not|remember to|call me|from now on|keep it|give me"
    r"|answer|reply|remind me|stop|avoid|use)\b"
    r"|\b(you should|i want you to|make sure to)\b",
    re.IGNORECASE,
)
_PERSONA = re.compile(
    r"\b(i am|i'm|my name|i live|i work|i like|i love|i prefer|i hate|i enjoy|my favou?rite"
    r"|i'?m allergic|i have (a|two|three) (kids?|children|sons?|daughters?|dogs?|cats?))\b",
    re.IGNORECASE,
)


def split_statements(text: str) -> list[str]:
    """Sentences worth remembering: not questions, not greetings, at least three words."""
    out: list[str] = []
    for part in _SENTENCE_END.split(text):
        sentence = part.strip()
        if len(sentence.split()) < _MIN_WORDS or sentence.endswith(("?", "？")):
            continue
        if _SMALL_TALK.match(sentence) and len(sentence.split()) < 6:
            continue
        out.append(sentence)
    return out


def classify(sentence: str) -> MemoryType:
    sentence = _FILLER.sub("", sentence)
    if _INSTRUCTION.search(sentence):
        return MemoryType.INSTRUCTION
    if _PERSONA.search(sentence):
        return MemoryType.PERSONA
    return MemoryType.EPISODIC


def extract(batch: Sequence[Turn], limit: int) -> list[NewMemory]:
    """Statements of the user's turns, attributed and dated, at most `limit` of them."""
    memories: list[NewMemory] = []
    for turn in batch:
        if turn.role is not Role.USER:
            continue
        for sentence in split_statements(turn.text):
            memories.append(_memory(turn, sentence))
    return memories[:limit]


def _memory(turn: Turn, sentence: str) -> NewMemory:
    kind = classify(sentence)
    when = resolve_relative_date(sentence, turn.timestamp)
    content = f"{turn.speaker or 'User'}: {sentence}"
    if when is not None:
        content += f" (on {day(when)})"
    return NewMemory(
        type=kind,
        content=content,
        priority={MemoryType.INSTRUCTION: 80, MemoryType.PERSONA: 60}.get(kind, 40),
        source_turn_ids=(turn.id,),
        activity_start=when if when is not None else turn.timestamp,
    )


SCENE_TITLES = {
    MemoryType.PERSONA: "Who the user is",
    MemoryType.EPISODIC: "What happened",
    MemoryType.INSTRUCTION: "Standing instructions",
}


def scene_body(previous: str, memories: Sequence[MemoryRecord], max_chars: int) -> str:
    """The previous body's lines plus the new memories, newest kept when over `max_chars`."""
    lines = [line for line in previous.splitlines() if line.strip()]
    for memory in memories:
        line = f"- {memory.content}"
        if line not in lines:
            lines.append(line)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) + 1 > max_chars:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(reversed(kept))


def scene_summary(kind: MemoryType, body: str) -> str:
    count = len(body.splitlines())
    first = body.splitlines()[-1][2:] if body else ""
    latest = first if len(first) <= 120 else first[:119] + "…"
    return f"{count} {kind.value} memories; latest: {latest}"


def profile_body(memories: Sequence[MemoryRecord], max_chars: int) -> str:
    """Standing instructions, then persona memories by priority, within `max_chars`."""
    ranked = sorted(
        memories,
        key=lambda m: (m.type is not MemoryType.INSTRUCTION, -m.priority, -m.valid_from),
    )
    lines: list[str] = []
    used = 0
    for memory in ranked:
        line = f"- {memory.content}"
        if used + len(line) + 1 > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)
