"""Scripted replies for the memory layers' stages, for tests and cost measurements.

`install_layer_handlers(server)` makes a `ScriptedLLM` answer every layer stage the way a
cooperative model would, derived only from what the prompt shows:
- `L1`: one memory per user turn of the NEW section, citing that turn's alias and date;
- `L1-reconcile`: `skip` when an existing memory says the same text, else `store`;
- `L2`: the first run creates one scene with every changed memory, later runs update it;
- `L3`: a profile naming the scenes.
Tests that need other answers push replies for a stage before these handlers are reached.
"""

from __future__ import annotations

import re
from typing import Any

from stratamem.testing.replies import RecordedRequest, Reply
from stratamem.testing.scripted_llm import ScriptedLLM

_TURN = re.compile(
    r"^\[(?P<alias>T\d+)\] (?P<date>\d{4}-\d\d-\d\d) \(\w+\) [\d:]+ UTC (?P<who>.+?)"
    r" \((?P<role>\w+)\): (?P<text>.*)$",
    re.MULTILINE,
)
_NEW = re.compile(r"^NEW \[(?P<alias>N\d+)\] \(\w+\) (?P<text>.*)$")
_EXISTING = re.compile(r"^  EXISTING \[(?P<alias>E\d+)\] \([^)]*\) (?P<text>.*)$")
_SCENE = re.compile(r"^\[(S\d+)\] ", re.MULTILINE)
_MEMORY = re.compile(r"^\[(M\d+)\] ", re.MULTILINE)
_TITLE = re.compile(r"^- (?P<title>[^:\n]+): ", re.MULTILINE)
_PERSONA = re.compile(r"\b(I am|I'm|my|I live|I like|I love|I prefer)\b", re.IGNORECASE)


def _user_text(request: RecordedRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages if m["role"] == "user")


def l1_reply(request: RecordedRequest) -> Reply:
    text = _user_text(request)
    new_part = text.split("NEW turns", 1)[-1]
    memories: list[dict[str, Any]] = []
    for found in _TURN.finditer(new_part):
        if found["role"] != "user":
            continue
        kind = "persona" if _PERSONA.search(found["text"]) else "episodic"
        memories.append(
            {
                "type": kind,
                "content": f"{found['who']}: {found['text']}",
                "priority": 50,
                "source_turn_ids": [found["alias"]],
                "activity_date": found["date"] if kind == "episodic" else None,
            }
        )
    return Reply.json({"memories": memories})


def reconcile_reply(request: RecordedRequest) -> Reply:
    decisions: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    text = ""
    for line in _user_text(request).splitlines():
        new = _NEW.match(line)
        if new:
            current = {"memory": new["alias"], "action": "store", "targets": [], "content": None}
            decisions.append(current)
            text = new["text"]
            continue
        existing = _EXISTING.match(line)
        if existing and current is not None and existing["text"] == text:
            current.update(action="skip", targets=[existing["alias"]])
    return Reply.json({"decisions": decisions})


def l2_reply(request: RecordedRequest) -> Reply:
    text = _user_text(request)
    memory_ids = _MEMORY.findall(text)
    scenes = _SCENE.findall(text)
    body = f"{len(memory_ids)} new memories folded in."
    if scenes:
        op = {"op": "update", "scene": scenes[0], "body": body, "memory_ids": memory_ids}
    else:
        op = {"op": "create", "title": "Life", "summary": "What the user shares.",
              "body": body, "memory_ids": memory_ids}  # fmt: skip
    return Reply.json({"operations": [op]})


def l3_reply(request: RecordedRequest) -> Reply:
    titles = _TITLE.findall(_user_text(request).split("CURRENT profile", 1)[0])
    return Reply.json({"profile": "The user talks about: " + ", ".join(titles) + "."})


def install_layer_handlers(server: ScriptedLLM) -> None:
    server.on("L1", l1_reply)
    server.on("L1-reconcile", reconcile_reply)
    server.on("L2", l2_reply)
    server.on("L3", l3_reply)
