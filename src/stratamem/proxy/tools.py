"""`read_tool_result`, the tool the proxy offers the model when compaction has put refs in its
context: the proxy answers its calls itself (the client never sees them) from offload's refs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.errors import StratamemError
from stratamem.offload import Offload
from stratamem.proxy.chat import arguments_of

READ_TOOL = "read_tool_result"
#: Rounds of the proxy's own tool calls within one client call; the last goes without the tool.
MAX_TOOL_ROUNDS = 3
DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": READ_TOOL,
        "description": (
            "Read back the exact result of an earlier tool call that was offloaded to save"
            " context: its summary shows `ref <id>`. Give `query` to get the part of a long"
            " result around those words."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "ref_id": {"type": "string", "description": "The ref shown in the summary."},
                "query": {"type": "string", "description": "Words to find in a long result."},
            },
            "required": ["ref_id"],
        },
    },
}


def tool_names(body: Mapping[str, Any]) -> list[str]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def allows_tools(body: Mapping[str, Any]) -> bool:
    """The request offers the model tools and lets it choose, and none is ours by name."""
    if body.get("tool_choice") == "none":
        return False
    names = tool_names(body)
    return bool(names) and READ_TOOL not in names


def with_tool(body: Mapping[str, Any]) -> dict[str, Any]:
    return {**body, "tools": [*body["tools"], DEFINITION]}


def without_tool(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request with the proxy's tool taken out again (the last round)."""
    tools = [t for t in body.get("tools") or [] if not is_own(t)]
    return {**body, "tools": tools}


def is_own(call: object) -> bool:
    function = call.get("function") if isinstance(call, Mapping) else None
    return isinstance(function, Mapping) and function.get("name") == READ_TOOL


async def answer_calls(
    offload: Offload, tenant: str, calls: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A tool message for each of the proxy's calls: the result, or what was wrong."""
    answers = []
    for call in calls:
        content = await _read(offload, tenant, call)
        answers.append({"role": "tool", "tool_call_id": str(call.get("id") or ""),
                        "content": content})  # fmt: skip
    return answers


async def _read(offload: Offload, tenant: str, call: Mapping[str, Any]) -> str:
    function = call.get("function")
    args = arguments_of(function.get("arguments") if isinstance(function, Mapping) else None)
    ref_id, query = args.get("ref_id"), args.get("query")
    if not isinstance(ref_id, str) or not ref_id:
        return "error: read_tool_result needs `ref_id`, the ref shown in a summary"
    try:
        found = await offload.read_back(
            tenant, ref_id, query=query if isinstance(query, str) and query else None
        )
    except StratamemError as exc:
        return f"error: {exc}"
    if found.complete:
        return found.text
    where = json.dumps({"start": found.start, "end": found.end, "total_chars": found.total_chars})
    return f"{found.text}\n[part of the result: {where}]"


def continued(
    body: Mapping[str, Any], message: Mapping[str, Any], results: list[dict[str, Any]]
) -> dict[str, Any]:
    """The request again, with the model's own-tool calls and their results appended."""
    calls = [c for c in message.get("tool_calls") or [] if is_own(c)]
    asked = {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
    return {**body, "messages": [*body["messages"], asked, *results]}
