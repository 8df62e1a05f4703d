"""`read_tool_result`, the tool the proxy offers the model when compaction has put refs in its
context: the proxy answers its calls itself (the client never sees them) from offload's refs.
How the tool is declared and called is each API's (`dialects`); what it answers is here."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stratamem.errors import StratamemError
from stratamem.offload import Offload

READ_TOOL = "read_tool_result"
#: Rounds of the proxy's own tool calls within one client call; the last goes without the tool.
MAX_TOOL_ROUNDS = 3
DESCRIPTION = (
    "Read back the exact result of an earlier tool call that was offloaded to save context: its"
    " summary shows `ref <id>`. Give `query` to get the part of a long result around those words."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ref_id": {"type": "string", "description": "The ref shown in the summary."},
        "query": {"type": "string", "description": "Words to find in a long result."},
    },
    "required": ["ref_id"],
}


@dataclass(frozen=True, slots=True)
class OwnCall:
    """A call of the model to the proxy's tool: its id and arguments."""

    id: str
    arguments: Mapping[str, Any]


async def answer_calls(offload: Offload, tenant: str, calls: Sequence[OwnCall]) -> list[str]:
    """What each of the proxy's calls gets back: the result, or what was wrong."""
    return [await _read(offload, tenant, call.arguments) for call in calls]


async def _read(offload: Offload, tenant: str, args: Mapping[str, Any]) -> str:
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
