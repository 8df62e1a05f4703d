"""What the MCP endpoint refuses before the SDK reads a message, as JSON-RPC errors.

JSON-RPC 2.0 as MCP uses it: a request's `id` is a string or an integer (never null, an
object, an array, a boolean or a fraction; an integer within 64 bits, as every number the
service takes); the SDK took any other `id` as a notification and
answered 202 with nothing. Numbers are JSON's, as everywhere in the service (`inputs`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Message, Receive

from stratamem.errors import InvalidInput
from stratamem.inputs import MAX_INTEGER, check_json

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def refusal(body: bytes) -> JSONResponse | None:
    """The JSON-RPC error answer for a body the endpoint must not pass on, or None. A body that
    is not JSON at all is left to the SDK, which answers its parse error."""
    try:
        messages = json.loads(body)
    except ValueError:
        return None
    for message in messages if isinstance(messages, list) else [messages]:
        if not isinstance(message, dict):
            continue
        problem = _id_problem(message)
        if problem is not None:
            return _error(INVALID_REQUEST, f"Invalid Request: {problem}")
        try:
            check_json(message, "the message")
        except InvalidInput as exc:
            return _error(INVALID_PARAMS, f"Invalid params: {exc}", message.get("id"))
    return None


def _id_problem(message: dict[str, Any]) -> str | None:
    if "id" not in message:
        return None
    given = message["id"]
    if isinstance(given, str):
        return None
    if isinstance(given, int) and not isinstance(given, bool):
        if abs(given) <= MAX_INTEGER:
            return None
        return f"id must be a string or an integer of at most 64 bits, not {given.bit_length()}"
    kind = _KINDS.get(type(given), type(given).__name__)
    return f"id must be a string or an integer, not {kind}"


_KINDS = {type(None): "null", dict: "an object", list: "an array", bool: "a boolean",
          float: "a number with a fraction"}  # fmt: skip


def _error(code: int, text: str, request_id: Any = None) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}
    return JSONResponse(body, status_code=400)


async def read_body(receive: Receive) -> bytes:
    """The whole request body (its size and arrival time are bounded by `BodyLimit`)."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` that hands out `body` first, then what the connection says next."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
