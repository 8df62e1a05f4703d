"""The HTTP side of the scripted server: a threading server and its request handler."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from stratamem.llm.wire import estimate_tokens
from stratamem.testing import anthropic
from stratamem.testing.replies import RecordedRequest, Reply
from stratamem.testing.streaming import DONE, ChunkMaker, tool_call_chunks

if TYPE_CHECKING:
    from stratamem.testing.scripted_llm import ScriptedLLM

_Builder = Callable[[RecordedRequest, Reply], dict[str, Any]]

CHAT_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"
_POLL_S = 0.05
"""How often a held request checks whether its client hung up (not a wait in any test)."""


class Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins the handler threads

    def __init__(self, address: tuple[str, int], owner: ScriptedLLM) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, RequestHandler)

    def track(self, connection: socket.socket, *, alive: bool) -> None:
        with self._connections_lock:
            if alive:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        """Shut down open keep-alive connections, so their threads end and can be joined."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)


class RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without NODELAY, Nagle and delayed ACKs add
        # ~40 ms to every reply on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, alive=True)

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # a client that reset its connection
            super().handle()

    def finish(self) -> None:
        self.server.track(self.connection, alive=False)
        with contextlib.suppress(OSError):  # the client went away; nothing left to flush
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return None  # keep test output quiet

    def do_GET(self) -> None:
        owner = self.server.owner
        owner.record("GET", self.path, self._headers(), None)
        if self.path != "/v1/models":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        data = [{"id": m, "object": "model", "owned_by": "stratamem"} for m in owner.models]
        self._send(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        body = self._read_json()
        request = self.server.owner.record("POST", self.path, self._headers(), body)
        if body is None:
            self._send(400, {"error": {"message": "the request body is not JSON"}})
        elif self.path == CHAT_PATH:
            self._answer(request, self._chat)
        elif self.path == "/v1/embeddings":
            self._answer(request, self._embeddings)
        elif self.path.split("?")[0] == MESSAGES_PATH:
            self._answer(request, self._message)
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    # -- helpers ---------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _answer(self, request: RecordedRequest, build: _Builder) -> None:
        reply = self.server.owner.reply_for(request)
        if reply is not None and reply.hold and not self._wait_for_gate():
            self.close_connection = True
            return
        if reply is not None and reply.disconnect:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply is None and request.path.split("?")[0] in (CHAT_PATH, MESSAGES_PATH):
            message = f"scripted server: no reply scripted for stage {request.stage!r}"
            self._send(501, {"error": {"message": message}})
        elif reply is not None and (reply.status != 200 or reply.body is not None):
            self._send(reply.status, reply.body, reply.headers)
        elif request.streamed and request.path.endswith("/chat/completions"):
            self._stream(request, reply or Reply())
        elif request.streamed and request.path.split("?")[0] == MESSAGES_PATH:
            self._stream_message(request, reply or Reply())
        else:
            self._send(200, build(request, reply or Reply()), {})

    def _wait_for_gate(self) -> bool:
        """Hold until released; False when the client hung up or the server is closing."""
        owner = self.server.owner
        owner.note_held()
        while not owner.gate.wait(_POLL_S):
            if owner.closing.is_set():
                return False
            if self._client_gone():
                owner.note_disconnected()
                return False
        return not owner.closing.is_set()

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK)
            return peeked == b""
        except OSError:
            return True

    def _count(self, request: RecordedRequest, reply: Reply) -> tuple[int, int]:
        """The reply's prompt and completion tokens (given, else estimated), counted."""
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = estimate_tokens(request.prompt_chars)
        completion = reply.completion_tokens
        if completion is None:
            completion = estimate_tokens(len(reply.content or ""))
        self.server.owner.count_tokens(request.stage, prompt, completion)
        return prompt, completion

    def _chat(self, request: RecordedRequest, reply: Reply) -> dict[str, Any]:
        owner = self.server.owner
        prompt, completion = self._count(request, reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": name, "arguments": args}}
                for i, name, args in reply.tool_calls
            ]
        return {
            "id": f"chatcmpl-scripted-{len(owner.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": request.body.get("model", "scripted-chat"),
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
            "usage": _usage(prompt, completion),
        }

    def _message(self, request: RecordedRequest, reply: Reply) -> dict[str, Any]:
        usage = self._count(request, reply)
        return anthropic.message(request, reply, self._completion_id("msg"), usage)

    def _completion_id(self, prefix: str) -> str:
        return f"{prefix}-scripted-{len(self.server.owner.requests)}"

    def _stream_message(self, request: RecordedRequest, reply: Reply) -> None:
        """The reply as Anthropic's message events."""
        prompt, completion = self._count(request, reply)
        try:
            self._start_events()
            for event in anthropic.opening(request, self._completion_id("msg"), prompt):
                self._write_chunk(event)
            pieces = reply.pieces()
            if pieces:
                self._write_chunk(anthropic.text_start())
            if not self._stream_pieces(reply, anthropic.text_delta):
                self.close_connection = True
                return
            for event in anthropic.closing(reply, 1 if pieces else 0, completion):
                self._write_chunk(event)
            self._write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream

    def _start_events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _stream(self, request: RecordedRequest, reply: Reply) -> None:
        """The reply as server-sent events, in HTTP/1.1 chunks (the connection stays usable)."""
        maker = ChunkMaker(request, self._completion_id("chatcmpl"))
        prompt, completion = self._count(request, reply)
        try:
            self._start_events()
            self._write_chunk(maker.chunk({"role": "assistant", "content": ""}))
            if not self._stream_pieces(reply, lambda piece: maker.chunk({"content": piece})):
                self.close_connection = True
                return
            for chunk in tool_call_chunks(maker, reply):
                self._write_chunk(chunk)
            self._write_chunk(maker.chunk({}, reply.finish_reason))
            if maker.include_usage:
                self._write_chunk(maker.usage(prompt, completion))
            self._write_chunk(DONE)
            self._write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream

    def _stream_pieces(self, reply: Reply, event_of: Callable[[str], bytes]) -> bool:
        """The content pieces; False when a hold after some of them ended without release."""
        closing = self.server.owner.closing
        for count, piece in enumerate(reply.pieces(), start=1):
            if reply.chunk_interval_s and closing.wait(reply.chunk_interval_s):
                return False
            self._write_chunk(event_of(piece))
            if count == reply.hold_after_chunks and not self._wait_for_gate():
                return False
        return True

    def _write_chunk(self, data: bytes) -> None:
        """One HTTP/1.1 chunk (empty: the last one), sent at once."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _embeddings(self, request: RecordedRequest, reply: Reply) -> dict[str, Any]:
        owner = self.server.owner
        inputs = request.body.get("input")
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs or []]
        vectors = reply.vectors if reply.vectors is not None else owner.embed_texts(texts)
        prompt = estimate_tokens(request.prompt_chars)
        owner.count_tokens(request.stage, prompt, 0)
        data = [
            {"object": "embedding", "index": i, "embedding": list(vector)}
            for i, vector in enumerate(vectors)
        ]
        model = request.body.get("model", "scripted-embed")
        return {"object": "list", "data": data, "model": model, "usage": _usage(prompt, 0)}

    def _send(self, status: int, body: Any, headers: Any = None) -> None:
        payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout, cancellation)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
