"""Reading LoCoMo conversations (see shared/data/locomo/SCHEMA.md) into capture messages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stratamem.errors import InvalidInput

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")
#: Seconds between consecutive turns of a session (turns carry no time of their own).
TURN_SPACING_S = 30.0


@dataclass(frozen=True, slots=True)
class Question:
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Sample:
    sample_id: str
    speakers: tuple[str, str]
    sessions: dict[str, list[dict[str, Any]]]
    questions: list[Question] = field(default_factory=list)

    @property
    def turn_count(self) -> int:
        return sum(len(turns) for turns in self.sessions.values())


def parse_session_date(text: str) -> float:
    """'1:56 pm on 8 May, 2023' → epoch seconds (UTC)."""
    try:
        parsed = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError as exc:
        raise InvalidInput(f"unreadable LoCoMo session date {text!r}") from exc
    return parsed.replace(tzinfo=UTC).timestamp()


def turn_text(turn: dict[str, Any]) -> str:
    """The turn's words, with a shared photo's caption kept as text."""
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def _messages(conversation: dict[str, Any], key: str, number: str) -> list[dict[str, Any]]:
    date_key = f"session_{number}_date_time"
    if date_key not in conversation:
        raise InvalidInput(f"LoCoMo session {key} has no {date_key}")
    start = parse_session_date(conversation[date_key])
    messages = []
    for index, turn in enumerate(conversation[key]):
        messages.append(
            {
                "id": turn["dia_id"],
                "role": "user",
                "speaker": turn["speaker"],
                "text": turn_text(turn),
                "timestamp": start + index * TURN_SPACING_S,
                "metadata": {"dia_id": turn["dia_id"]},
            }
        )
    return messages


def evidence_ids(raw: list[Any]) -> tuple[str, ...]:
    """Normalised dialogue ids (`D3:7`) from LoCoMo's sometimes malformed evidence strings."""
    found: list[str] = []
    for item in raw:
        for session, turn in _EVIDENCE.findall(str(item)):
            found.append(f"D{int(session)}:{int(turn)}")
    return tuple(dict.fromkeys(found))


def _questions(raw: list[dict[str, Any]]) -> list[Question]:
    questions = []
    for qa in raw:
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(
            Question(
                question=str(qa["question"]),
                answer=str(answer),
                category=int(qa["category"]),
                evidence=evidence_ids(qa.get("evidence", [])),
            )
        )
    return questions


def load(path: Path) -> list[Sample]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"cannot read LoCoMo data from {path}: {exc}") from exc
    if not isinstance(data, list):
        raise InvalidInput(f"{path}: expected a list of LoCoMo samples")
    return list(_samples(data))


def _samples(data: list[dict[str, Any]]) -> Iterator[Sample]:
    for raw in data:
        conversation = raw["conversation"]
        numbered = sorted(
            (int(m.group(1)), key)
            for key in conversation
            if (m := _SESSION_KEY.match(key))
        )
        sessions = {key: _messages(conversation, key, str(n)) for n, key in numbered}
        yield Sample(
            sample_id=str(raw["sample_id"]),
            speakers=(conversation["speaker_a"], conversation["speaker_b"]),
            sessions=sessions,
            questions=_questions(raw.get("qa", [])),
        )
