"""Reading JSONL message files for `stratamem import`, validated before anything is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratamem.capture import parse_message
from stratamem.domain import Message, check_ident
from stratamem.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class ImportBatch:
    session: str
    messages: list[Message]


def read_jsonl(path: Path, default_session: str | None) -> list[ImportBatch]:
    """Parse and validate every line; a bad line raises with its number and nothing is kept.

    Each line is a message object (`role`, `content` or `text`, optional `speaker`, `timestamp`,
    `id`, `metadata`) with a `session`, unless `default_session` is given.
    """
    batches: dict[str, list[Message]] = {}
    for number, raw in _lines(path):
        session = raw.pop("session", default_session)
        if session is None:
            raise InvalidInput(f"{path}:{number}: no 'session' (or pass --session)")
        try:
            check_ident(str(session), "session")
            message = parse_message(raw, number)
        except InvalidInput as exc:
            raise InvalidInput(f"{path}:{number}: {exc}") from exc
        if not message.text.strip():
            raise InvalidInput(f"{path}:{number}: text is empty")
        batches.setdefault(str(session), []).append(message)
    if not batches:
        raise InvalidInput(f"{path}: no messages")
    return [ImportBatch(session, messages) for session, messages in batches.items()]


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}:{number}: malformed JSON: {exc.msg}") from exc
            if not isinstance(raw, dict):
                raise InvalidInput(f"{path}:{number}: each line must be a JSON object")
            yield number, raw
