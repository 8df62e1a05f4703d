"""`MemoryProxy`: an OpenAI chat call with memory around it.

pre-call (`precall.prepare`: recall, compaction, the request rewritten) → the upstream call,
whole or streamed (`stream.ChatStream` follows it, chunk by chunk, holding nothing back but the
final `[DONE]`) → the proxy's own tool calls answered in up to `MAX_TOOL_ROUNDS` more upstream
calls → post-call (`postcall.record`: capture and offload), waited for at most
`RECORD_WAIT_S` before the answer ends (it goes on in the background after that). Upstream
errors reach the client with their status; memory's failures never do.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from stratamem.domain import check_ident
from stratamem.proxy import tools
from stratamem.proxy.answers import Answer, StreamAnswer, WholeAnswer, openai_error
from stratamem.proxy.anthropic import AnthropicMessages, anthropic_error
from stratamem.proxy.chat import ChatMessage, conversation_session
from stratamem.proxy.deps import ProxyDeps
from stratamem.proxy.dialects import Dialect, OpenAIChat, OwnFilter, StreamState
from stratamem.proxy.postcall import record
from stratamem.proxy.precall import Prepared, prepare
from stratamem.proxy.stream import SSESplitter
from stratamem.proxy.tools import OwnCall
from stratamem.proxy.upstream import Upstream, UpstreamUnavailable

MODELS_PATH = "/models"
#: How long an answer's end waits for its capture; a slower capture finishes in the background.
RECORD_WAIT_S = 2.0
#: Session of a conversation without a user message and without a configured default.
FALLBACK_SESSION = "proxy"


@dataclass(frozen=True, slots=True)
class Call:
    """One client call: whose, which session, in which API, what goes upstream."""

    tenant: str
    session: str
    dialect: Dialect
    prepared: Prepared
    headers: Mapping[str, str]
    """Headers of the client's that the upstream needs (Anthropic's version and betas)."""


class MemoryProxy:
    def __init__(self, deps: ProxyDeps) -> None:
        self.deps = deps
        settings = deps.settings
        timeout_s = settings.upstream_timeout_s
        self.openai = OpenAIChat(Upstream(settings.upstream, _bearer(settings.upstream_key),
                                          timeout_s, openai_error))  # fmt: skip
        key = settings.anthropic_upstream_key
        self.anthropic = AnthropicMessages(Upstream(
            settings.anthropic_upstream, {"x-api-key": key.get_secret_value()} if key else {},
            timeout_s, anthropic_error, "STRATAMEM_PROXY_ANTHROPIC_UPSTREAM",
        ))  # fmt: skip
        self._recording: set[asyncio.Task[None]] = set()

    def session_of(self, header: str | None, messages: list[ChatMessage]) -> str:
        """`X-Stratamem-Session`, else the configured session, else one per conversation."""
        if header is not None:
            return check_ident(header.strip(), "X-Stratamem-Session")
        if self.deps.settings.session:
            return check_ident(self.deps.settings.session, "STRATAMEM_PROXY_SESSION")
        return conversation_session(messages) or FALLBACK_SESSION

    async def models(self, dialect: Dialect | None = None,
                     headers: Mapping[str, str] | None = None) -> WholeAnswer:  # fmt: skip
        """The upstream's models, as it lists them."""
        dialect = dialect or self.openai
        try:
            return await dialect.upstream.get(MODELS_PATH, headers)
        except UpstreamUnavailable as exc:
            return exc.answer

    async def passed(self, dialect: Dialect, path: str, body: Mapping[str, Any],
                     headers: Mapping[str, str] | None = None) -> WholeAnswer:  # fmt: skip
        """A request forwarded as it is, without memory (Anthropic's `count_tokens`)."""
        try:
            return await dialect.upstream.post(path, body, headers)
        except UpstreamUnavailable as exc:
            return exc.answer

    async def chat(
        self,
        tenant: str,
        body: dict[str, Any],
        *,
        session: str | None = None,
        budget_tokens: int | None = None,
        dialect: Dialect | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """The upstream's answer to `body`, with memory around it."""
        dialect = dialect or self.openai
        view = dialect.view(body)
        named = self.session_of(session, view)
        if not dialect.upstream.configured:
            return dialect.upstream.unconfigured()
        budget = self.deps.settings.budget_tokens if budget_tokens is None else budget_tokens
        prepared = await prepare(self.deps, dialect, tenant, named, body, budget, view)
        call = Call(tenant, named, dialect, prepared, headers or {})
        try:
            if body.get("stream") is True:
                return await self._streamed(call)
            return await self._whole(call)
        except UpstreamUnavailable as exc:
            return exc.answer

    # -- whole answers ------------------------------------------------------------------------
    async def _whole(self, call: Call) -> WholeAnswer:
        dialect, body, rounds = call.dialect, call.prepared.body, 0
        while True:
            answer = await dialect.upstream.post(dialect.path, body, call.headers)
            parsed = answer.json() if answer.ok else None
            reply = dialect.reply(parsed)
            own = reply.own if reply is not None and call.prepared.offered_tool else []
            if reply is None or not own or reply.others or rounds == tools.MAX_TOOL_ROUNDS:
                break
            body = await self._next_round(call, body, reply.text, own, rounds)
            rounds += 1
        if not answer.ok:
            return answer
        if own:  # beside the client's calls, or past the rounds: the client never sees them
            kept = json.dumps(dialect.without_own(parsed)).encode()
            answer = WholeAnswer(answer.status, kept, answer.headers, answer.media_type)
        await self._record(call, reply.text if reply is not None else None)
        return answer

    async def _next_round(
        self, call: Call, body: dict[str, Any], text: str | None, own: list[OwnCall], rounds: int
    ) -> dict[str, Any]:
        """The request again with the proxy's calls answered (the last round without the tool)."""
        offload = self.deps.offload
        assert offload is not None  # the tool is offered only with offload
        results = await tools.answer_calls(offload, call.tenant, own)
        body = call.dialect.continued(body, text, own, results)
        return call.dialect.without_tool(body) if rounds + 1 == tools.MAX_TOOL_ROUNDS else body

    # -- streams -------------------------------------------------------------------------------
    async def _streamed(self, call: Call) -> Answer:
        """The stream, once the upstream has said yes (its error, or an answer it would not
        stream, is answered whole with its status)."""
        dialect = call.dialect
        stack = AsyncExitStack()
        try:
            response = await stack.enter_async_context(
                dialect.upstream.stream(dialect.path, call.prepared.body, call.headers)
            )
            if not (response.is_success and _is_event_stream(response)):
                answer = await dialect.upstream.read_rest(response)
                await stack.aclose()
                if answer.ok:
                    reply = dialect.reply(answer.json())
                    await self._record(call, reply.text if reply is not None else None)
                return answer
        except BaseException:
            await stack.aclose()
            raise
        return StreamAnswer(self._events(call, stack, response))

    async def _events(
        self, call: Call, stack: AsyncExitStack, response: httpx.Response
    ) -> AsyncGenerator[bytes, None]:
        """The upstream's events as they come; the exchange is recorded once the stream has
        ended properly, before its last event goes out. A client that goes away closes this
        generator: the upstream call ends with it, and nothing is recorded."""
        dialect = call.dialect
        try:
            said: list[str] = []
            body = call.prepared.body
            own = dialect.own_filter() if call.prepared.offered_tool else None
            for rounds in range(tools.MAX_TOOL_ROUNDS + 1):
                stream = dialect.stream()
                async for event in self._passed(dialect, response, stream, own):
                    yield event
                said.extend(stream.text)
                if own is None or not (stream.complete and own.only_own(stream)):
                    break
                if rounds == tools.MAX_TOOL_ROUNDS:
                    break
                asked = own.calls(stream)
                body = await self._next_round(call, body, stream.answer or None, asked, rounds)
                own.next_round()
                await stack.aclose()
                response = await stack.enter_async_context(
                    dialect.upstream.stream(dialect.path, body, call.headers)
                )
                if not response.is_success:
                    yield dialect.error_event(await dialect.upstream.read_rest(response))
                    return
            if stream.complete:
                await self._record(call, "".join(said))
            if stream.done_event is not None:
                yield stream.done_event
        except UpstreamUnavailable as exc:
            yield dialect.error_event(exc.answer)
        finally:
            await stack.aclose()

    async def _passed(
        self, dialect: Dialect, response: httpx.Response, stream: StreamState,
        own: OwnFilter | None,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        """One upstream stream's events for the client, up to (without) its last; the proxy's
        own calls, and the end of a round that only they made, are kept back."""
        splitter = SSESplitter()
        async for data in dialect.upstream.body_of(response):
            for event in splitter.feed(data):
                stream.observe(event)
                if stream.done:
                    return
                out = event if own is None else own.rewrite(event)
                if out is not None and not (own and stream.finished and own.only_own(stream)):
                    yield out

    # -- recording ------------------------------------------------------------------------------
    async def _record(self, call: Call, answer: str | None) -> None:
        """Capture and offload the exchange; the answer waits at most `RECORD_WAIT_S` for it
        (the work goes on after that, and is waited for at shutdown)."""
        work = record(self.deps, call.tenant, call.session, call.prepared.view, answer)
        task = asyncio.get_running_loop().create_task(work)
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)
        await asyncio.wait({task}, timeout=RECORD_WAIT_S)

    async def aclose(self) -> None:
        """Wait for the recordings still running (as long as one may take), then close."""
        if self._recording:
            _, late = await asyncio.wait(set(self._recording), timeout=RECORD_WAIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self.openai.upstream.aclose()
        await self.anthropic.upstream.aclose()


def _bearer(key: SecretStr | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}


def _is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")
