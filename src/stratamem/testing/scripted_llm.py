"""A scripted OpenAI-compatible HTTP server, for tests of anything that calls an LLM endpoint.

A real HTTP server (stdlib `ThreadingHTTPServer`, 127.0.0.1, a free port, a background thread)
serving `POST /v1/chat/completions`, `POST /v1/embeddings` and `GET /v1/models`. Tests script it:

    with ScriptedLLM() as llm:
        llm.push(Reply.rate_limited(2), Reply.json({"ok": True}))   # next chat replies, in order
        llm.push_for("L1", Reply.text("not json"))                   # next replies of stage L1
        llm.on("L2", lambda request: Reply.json({...}))              # compute a stage's replies
        llm.handler = lambda request: Reply.json({...})              # or any request's replies
        ScriptedLLM(endpoint=Endpoint.llamacpp())   # refuses OpenAI's json_schema with a 500
        ... point the client at llm.base_url ...
        assert llm.usage()["L1"]["calls"] == 1

A request's stage comes from the `X-Stratamem-Stage` header, else a `[stage: NAME]` marker in its
system prompt. Chat replies come from the stage's queue, then the chat queue, then the stage's
handler (`on`), then `handler`; a handler may return None to pass the request on;
with none of them, the server answers 501 and records the request in `unscripted`. Embeddings
come from the embeddings queue, else from `embed_fn` (deterministic feature hashing by default).
Held replies wait on an event that `release()` and teardown set, so nothing waits unboundedly.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from stratamem.embed.hashing import hash_features
from stratamem.testing import _http
from stratamem.testing.endpoints import Endpoint
from stratamem.testing.replies import (
    RecordedRequest,
    Reply,
    StageUsage,
    stage_of,
)

Handler = Callable[[RecordedRequest], Reply | None]
EmbedFn = Callable[[str], Sequence[float]]

CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
MODELS_PATH = "/v1/models"
DEFAULT_EMBED_DIM = 64
_SHUTDOWN_POLL_S = 0.02
"""How often the serving loop checks for shutdown, so teardown takes milliseconds."""


class ScriptedLLM:
    """The scripted server. Use as a context manager, or `start()` / `stop()`."""

    def __init__(
        self,
        *,
        handler: Handler | None = None,
        embed_dim: int = DEFAULT_EMBED_DIM,
        embed_fn: EmbedFn | None = None,
        accept_response_format: bool = True,
        endpoint: Endpoint | None = None,
        models: Sequence[str] = ("scripted-chat", "scripted-embed"),
    ) -> None:
        self.handler = handler
        self.embed_fn: EmbedFn = embed_fn or (lambda text: hash_features(text, embed_dim).tolist())
        self.accept_response_format = accept_response_format
        self.endpoint = endpoint or (
            Endpoint.openai() if accept_response_format else Endpoint.plain()
        )
        self.models = tuple(models)
        self.requests: list[RecordedRequest] = []
        self.unscripted: list[RecordedRequest] = []
        self._chat: collections.deque[Reply] = collections.deque()
        self._embeddings: collections.deque[Reply] = collections.deque()
        self._staged: dict[str, collections.deque[Reply]] = collections.defaultdict(
            collections.deque
        )
        self._stage_handlers: dict[str, Handler] = {}
        self._usage: dict[str, StageUsage] = collections.defaultdict(StageUsage)
        self._lock = threading.Lock()
        self._events = threading.Condition(self._lock)
        self._held = 0
        self._disconnected = 0
        self.gate = threading.Event()
        self.closing = threading.Event()
        self._httpd: _http.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ScriptedLLM:
        if self._httpd is not None:
            raise RuntimeError("the scripted server is already running")
        self._httpd = _http.Server(("127.0.0.1", 0), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _SHUTDOWN_POLL_S},
            name="scripted-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release held replies, close every connection and wait for the server's threads."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.closing.set()
        self.gate.set()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the scripted server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The API root, including `/v1`, as OpenAI-compatible clients take it."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ---------------------------------------------------------------------------
    def push(self, *replies: Reply) -> None:
        """Queue the next chat replies, whatever their stage."""
        with self._lock:
            self._chat.extend(replies)

    def push_for(self, stage: str, *replies: Reply) -> None:
        """Queue the next chat replies of one stage; they go before the general chat queue."""
        with self._lock:
            self._staged[stage].extend(replies)

    def on(self, stage: str, handler: Handler) -> None:
        """Answer the chat requests of `stage` with `handler` once its queue is empty."""
        with self._lock:
            self._stage_handlers[stage] = handler

    def push_embeddings(self, *replies: Reply) -> None:
        """Queue the next embeddings replies; when empty, `embed_fn` answers."""
        with self._lock:
            self._embeddings.extend(replies)

    def release(self) -> None:
        """Let every held reply (now and later) be answered."""
        self.gate.set()

    def pending(self) -> int:
        """How many queued replies have not been served yet."""
        with self._lock:
            staged = sum(len(queue) for queue in self._staged.values())
            return len(self._chat) + len(self._embeddings) + staged

    # -- observing ---------------------------------------------------------------------------
    def calls(self, stage: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (stage is None or r.stage == stage) and (path is None or r.path == path)
            ]

    def usage(self) -> dict[str, dict[str, int]]:
        """`{stage: {calls, prompt_tokens, completion_tokens}}` as the server counted them."""
        with self._lock:
            return {stage: usage.as_dict() for stage, usage in self._usage.items()}

    def wait_held(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        """Block until `count` requests are being held; False if that did not happen in time."""
        with self._events:
            return self._events.wait_for(lambda: self._held >= count, timeout_s)

    def wait_disconnected(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        """Block until `count` held requests saw their client hang up."""
        with self._events:
            return self._events.wait_for(lambda: self._disconnected >= count, timeout_s)

    async def until_held(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        return await asyncio.to_thread(self.wait_held, count, timeout_s)

    async def until_disconnected(self, count: int = 1, timeout_s: float = 10.0) -> bool:
        return await asyncio.to_thread(self.wait_disconnected, count, timeout_s)

    # -- called by the request handler threads -----------------------------------------------
    def record(self, method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        request = RecordedRequest(method, path, headers, body, stage_of(path, headers, body))
        with self._lock:
            self.requests.append(request)
            if method == "POST":
                self._usage[request.stage].calls += 1
        return request

    def reply_for(self, request: RecordedRequest) -> Reply | None:
        """The scripted reply, or None when nothing is scripted for this chat request."""
        if request.path == EMBEDDINGS_PATH:
            with self._lock:
                return self._embeddings.popleft() if self._embeddings else None
        refusal = self.endpoint.answer_to(request.form)
        if refusal is not None:
            return refusal
        with self._lock:
            staged = self._staged.get(request.stage)
            if staged:
                return staged.popleft()
            if self._chat:
                return self._chat.popleft()
            handlers = [self._stage_handlers.get(request.stage), self.handler]
        reply = _first_reply(request, handlers)
        if reply is None:
            with self._lock:
                self.unscripted.append(request)
        return reply

    def count_tokens(self, stage: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self._usage[stage].prompt_tokens += prompt_tokens
            self._usage[stage].completion_tokens += completion_tokens

    def note_held(self) -> None:
        with self._events:
            self._held += 1
            self._events.notify_all()

    def note_disconnected(self) -> None:
        with self._events:
            self._disconnected += 1
            self._events.notify_all()

    def embed_texts(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(self.embed_fn(text)) for text in texts]


def _first_reply(request: RecordedRequest, handlers: list[Handler | None]) -> Reply | None:
    for handler in handlers:
        reply = handler(request) if handler is not None else None
        if reply is not None:
            return reply
    return None


def scripted_llm_fixture(
    *, name: str = "scripted_llm", scope: str = "function", **options: Any
) -> Any:
    """A pytest fixture that yields a running `ScriptedLLM` and stops it afterwards.

    In a conftest.py: `scripted_llm = scripted_llm_fixture()`; `options` go to `ScriptedLLM`.
    """
    import pytest  # noqa: PLC0415  (pytest is only needed by users of the fixture)

    def fixture() -> Iterator[ScriptedLLM]:
        with ScriptedLLM(**options) as server:
            yield server

    return pytest.fixture(fixture, name=name, scope=scope)  # type: ignore[call-overload]
