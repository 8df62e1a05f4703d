"""A deterministic stand-in model behind the scripted server: it reads the offload prompts the
way a model would (the ids in brackets) and answers valid JSON."""

from __future__ import annotations

import re
from typing import Any

from stratamem.testing import RecordedRequest, Reply

CALL_LINE_TOOL = re.compile(r"^\[([^\]]+)\] tool: (\S+)$", re.MULTILINE)
NEW_CALL_LINE = re.compile(r"^\[([^\]]+)\] ", re.MULTILINE)


def user_text(request: RecordedRequest) -> str:
    return "\n".join(
        str(m.get("content") or "") for m in request.messages if m.get("role") == "user"
    )


def summaries(request: RecordedRequest) -> Reply:
    """offload-l1: a short summary for every call shown; scored 8, or 2 for `read_file`."""
    shown = CALL_LINE_TOOL.findall(user_text(request).split("TOOL CALLS", 1)[-1])
    entries = [
        {"call_id": i, "summary": f"summary of {i}", "score": 2 if tool == "read_file" else 8}
        for i, tool in shown
    ]
    return Reply.json({"entries": entries})


def judgment(label: str, **fields: Any) -> Reply:
    """offload-l15: a new task named `label` (or the given fields)."""
    body: dict[str, Any] = {"completed": False, "continues": None, "new_task": label,
                            "long_task": False}
    body.update(fields)
    return Reply.json(body)


def diagram(request: RecordedRequest) -> Reply:
    """offload-l2: a two-stage diagram, every new call mapped to the `work` node."""
    text = user_text(request)
    ids = NEW_CALL_LINE.findall(text.split("NEW TOOL CALLS", 1)[-1])
    rewrite = 'flowchart TD\n  plan["Plan the fix"] --> work["Investigate and change code"]'
    return Reply.json(
        {"rewrite": rewrite, "edits": [], "mapping": [{"call_id": i, "node": "work"} for i in ids]}
    )
