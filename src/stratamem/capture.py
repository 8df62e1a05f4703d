"""Capture: validate caller messages and turn them into L0 turns with stable ids.

Recall blocks that stratamem injects into prompts are stripped first, so recalled memories are
never captured back as new conversation.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from stratamem.domain import Message, Role, Turn, check_ident
from stratamem.errors import InvalidInput
from stratamem.inputs import check_json, nfc
from stratamem.timestamps import check_timestamp, parse_rfc3339

#: Tags of the blocks `recall()` renders; any text inside them is removed on capture.
INJECTED_TAGS = ("stratamem-recall", "stratamem-profile", "stratamem-context")
_BLOCK = re.compile(
    r"<(?P<tag>" + "|".join(INJECTED_TAGS) + r")\b[^>]*>.*?(?:</(?P=tag)\s*>|\Z)",
    re.DOTALL | re.IGNORECASE,
)
MAX_METADATA_CHARS = 16_384
ROLE_ALIASES = {"human": Role.USER, "ai": Role.ASSISTANT, "bot": Role.ASSISTANT}


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """What a capture call did: ids of every accepted message, in order, and what was new."""

    ids: list[str]
    stored: list[str]
    duplicates: list[str]
    skipped_empty: int

    def to_json(self) -> dict[str, Any]:
        return {
            "ids": self.ids,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "skipped_empty": self.skipped_empty,
        }


def strip_injected(text: str) -> str:
    """Remove stratamem's own recall blocks (and an unterminated one running to the end)."""
    return _BLOCK.sub("", text).strip()


def parse_message(raw: Message | Mapping[str, Any], position: int) -> Message:
    """Accept a `Message` or an OpenAI-style dict (`role`, `content`/`text`, `name`/`speaker`)."""
    if isinstance(raw, Message):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"message {position}: expected an object, got {type(raw).__name__}")
    text = raw.get("text", raw.get("content"))
    if not isinstance(text, str):
        raise InvalidInput(f"message {position}: 'content' (or 'text') must be a string")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidInput(f"message {position}: 'metadata' must be an object")
    speaker = raw.get("speaker", raw.get("name"))
    msg_id = raw.get("id")
    return Message(
        role=parse_role(raw.get("role"), position),
        text=text,
        speaker=None if speaker is None else str(speaker),
        timestamp=parse_timestamp(raw.get("timestamp"), position),
        id=None if msg_id is None else str(msg_id),
        metadata=dict(metadata),
    )


def parse_role(value: object, position: int) -> Role:
    if isinstance(value, Role):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ROLE_ALIASES:
            return ROLE_ALIASES[lowered]
        try:
            return Role(lowered)
        except ValueError:
            pass
    allowed = ", ".join(r.value for r in Role)
    raise InvalidInput(f"message {position}: unknown role {value!r} (use one of: {allowed})")


def parse_timestamp(value: object, position: int) -> float | None:
    """Epoch seconds, or an RFC 3339 string (a time without an offset is taken as UTC), within
    the accepted range (`stratamem.timestamps`)."""
    if value is None:
        return None
    what = f"message {position}: timestamp"
    if isinstance(value, bool):
        raise InvalidInput(f"{what} must be epoch seconds or an RFC 3339 time")
    if isinstance(value, int | float):
        return check_timestamp(value, f"{what} {value!r}")
    if isinstance(value, str):
        return parse_rfc3339(value.strip(), what)
    raise InvalidInput(f"{what} must be epoch seconds or an RFC 3339 time")


def turn_id(tenant: str, session: str, key: str) -> str:
    digest = hashlib.blake2b(f"{tenant}\x1f{session}\x1f{key}".encode(), digest_size=12)
    return "t_" + digest.hexdigest()


def build_turns(
    tenant: str,
    session: str,
    messages: Sequence[Message | Mapping[str, Any]],
    now: float,
    max_chars: int,
) -> tuple[list[Turn], int]:
    """Validate every message first (all or nothing); return the turns and how many were empty
    once stratamem's own blocks were stripped."""
    check_ident(tenant, "tenant")
    check_ident(session, "session")
    if not messages:
        raise InvalidInput("no messages to capture")
    parsed = [_validated(parse_message(raw, i), i, max_chars) for i, raw in enumerate(messages)]
    occurrences: Counter[str] = Counter()
    turns: list[Turn] = []
    skipped = 0
    for message in parsed:
        text = strip_injected(message.text)
        if not text:
            skipped += 1
            continue
        key = _identity_key(message, text, occurrences)
        turns.append(
            Turn(
                id=turn_id(tenant, session, key),
                tenant=tenant,
                session=session,
                role=message.role,
                text=text,
                timestamp=message.timestamp if message.timestamp is not None else now,
                speaker=message.speaker,
                metadata=message.metadata,
            )
        )
    return turns, skipped


def _validated(message: Message, position: int, max_chars: int) -> Message:
    """`message` checked, with its text and speaker normalised to NFC (`stratamem.inputs`)."""
    what = f"message {position}"
    speaker = None if message.speaker is None else nfc(message.speaker, f"{what}: speaker")
    check_json(message.metadata, f"{what}: metadata")
    message = replace(message, text=nfc(message.text, f"{what}: text"), speaker=speaker)
    if not message.text.strip():
        raise InvalidInput(f"message {position}: text is empty")
    if len(message.text) > max_chars:
        raise InvalidInput(
            f"message {position}: text has {len(message.text)} characters, more than the"
            f" limit of {max_chars} (setting max_turn_chars)"
        )
    if message.speaker is not None and len(message.speaker) > 200:
        raise InvalidInput(f"message {position}: speaker name longer than 200 characters")
    try:
        encoded = json.dumps(message.metadata, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"message {position}: metadata is not JSON: {exc}") from exc
    if len(encoded) > MAX_METADATA_CHARS:
        raise InvalidInput(
            f"message {position}: metadata is {len(encoded)} characters as JSON,"
            f" more than {MAX_METADATA_CHARS}"
        )
    return message


def _identity_key(message: Message, text: str, occurrences: Counter[str]) -> str:
    """What makes a message the same message when it is captured again."""
    if message.id is not None:
        return "id\x1f" + message.id
    stamp = "" if message.timestamp is None else repr(message.timestamp)
    base = f"{message.role.value}\x1f{message.speaker or ''}\x1f{stamp}\x1f{text}"
    occurrences[base] += 1
    return f"{base}\x1f{occurrences[base]}"
