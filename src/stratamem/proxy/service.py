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

from stratamem.domain import check_ident
from stratamem.proxy import tools
from stratamem.proxy.answers import Answer, StreamAnswer, WholeAnswer
from stratamem.proxy.chat import ChatMessage, conversation_session, messages_of, text_of
from stratamem.proxy.deps import ProxyDeps
from stratamem.proxy.postcall import record
from stratamem.proxy.precall import Prepared, prepare
from stratamem.proxy.stream import ChatStream, OwnCalls, SSESplitter
from stratamem.proxy.upstream import NOT_CONFIGURED, Upstream, UpstreamUnavailable

CHAT_PATH = "/chat/completions"
MODELS_PATH = "/models"
#: How long an answer's end waits for its capture; a slower capture finishes in the background.
RECORD_WAIT_S = 2.0
#: Session of a conversation without a user message and without a configured default.
FALLBACK_SESSION = "proxy"


@dataclass(frozen=True, slots=True)
class Call:
    """One client call: whose, which session, what the client sent, what goes upstream."""

    tenant: str
    session: str
    messages: list[ChatMessage]
    prepared: Prepared


class MemoryProxy:
    def __init__(self, deps: ProxyDeps) -> None:
        self.deps = deps
        self.upstream = Upstream(deps.settings)
        self._recording: set[asyncio.Task[None]] = set()

    def session_of(self, header: str | None, messages: list[ChatMessage]) -> str:
        """`X-Stratamem-Session`, else the configured session, else one per conversation."""
        if header is not None:
            return check_ident(header.strip(), "X-Stratamem-Session")
        if self.deps.settings.session:
            return check_ident(self.deps.settings.session, "STRATAMEM_PROXY_SESSION")
        return conversation_session(messages) or FALLBACK_SESSION

    async def models(self) -> WholeAnswer:
        try:
            return await self.upstream.get(MODELS_PATH)
        except UpstreamUnavailable as exc:
            return exc.answer

    async def chat(
        self,
        tenant: str,
        body: dict[str, Any],
        *,
        session: str | None = None,
        budget_tokens: int | None = None,
    ) -> Answer:
        """The upstream's answer to `body`, with memory around it."""
        messages = messages_of(body)
        named = self.session_of(session, messages)
        if not self.upstream.configured:
            return NOT_CONFIGURED
        budget = self.deps.settings.budget_tokens if budget_tokens is None else budget_tokens
        prepared = await prepare(self.deps, tenant, named, body, budget)
        call = Call(tenant, named, messages, prepared)
        try:
            if body.get("stream") is True:
                return await self._streamed(call)
            return await self._whole(call)
        except UpstreamUnavailable as exc:
            return exc.answer

    # -- whole answers ------------------------------------------------------------------------
    async def _whole(self, call: Call) -> WholeAnswer:
        body = call.prepared.body
        rounds = 0
        while True:
            answer = await self.upstream.post(CHAT_PATH, body)
            parsed = answer.json() if answer.ok else None
            message = _first_message(parsed)
            own = _own_calls(message) if call.prepared.offered_tool else []
            if message is None or not own or rounds == tools.MAX_TOOL_ROUNDS:
                break
            if len(own) < _call_count(message):
                break
            body = await self._next_round(call, body, message, own, rounds)
            rounds += 1
        if not answer.ok:
            return answer
        if own:
            answer = _without_own_calls(answer, parsed)
        await self._record(call, text_of(message.get("content")) if message else None)
        return answer

    async def _next_round(
        self,
        call: Call,
        body: dict[str, Any],
        message: Mapping[str, Any],
        own: list[dict[str, Any]],
        rounds: int,
    ) -> dict[str, Any]:
        """The request again with the proxy's calls answered (the last round without the tool)."""
        offload = self.deps.offload
        assert offload is not None  # the tool is offered only with offload
        results = await tools.answer_calls(offload, call.tenant, own)
        body = tools.continued(body, message, results)
        return tools.without_tool(body) if rounds + 1 == tools.MAX_TOOL_ROUNDS else body

    # -- streams -------------------------------------------------------------------------------
    async def _streamed(self, call: Call) -> Answer:
        """The stream, once the upstream has said yes (its error, or an answer it would not
        stream, is answered whole with its status)."""
        stack = AsyncExitStack()
        try:
            response = await stack.enter_async_context(
                self.upstream.stream(CHAT_PATH, call.prepared.body)
            )
            if not (response.is_success and _is_event_stream(response)):
                answer = await self.upstream.read_rest(response)
                await stack.aclose()
                if answer.ok:
                    message = _first_message(answer.json())
                    await self._record(call, text_of(message.get("content")) if message else None)
                return answer
        except BaseException:
            await stack.aclose()
            raise
        return StreamAnswer(self._events(call, stack, response))

    async def _events(
        self, call: Call, stack: AsyncExitStack, response: httpx.Response
    ) -> AsyncGenerator[bytes, None]:
        """The upstream's events as they come; the exchange is recorded once the stream has
        ended properly, before its `[DONE]` goes out. A client that goes away closes this
        generator: the upstream call ends with it, and nothing is recorded."""
        try:
            said: list[str] = []
            body = call.prepared.body
            for rounds in range(tools.MAX_TOOL_ROUNDS + 1):
                own = OwnCalls(tools.READ_TOOL) if call.prepared.offered_tool else None
                stream = ChatStream()
                async for event in self._passed(response, stream, own):
                    yield event
                said.extend(stream.text)
                if own is None or not (stream.complete and own.only_own(stream)):
                    break
                if rounds == tools.MAX_TOOL_ROUNDS:
                    break
                asked = _streamed_message(stream, own)
                body = await self._next_round(call, body, asked, asked["tool_calls"], rounds)
                await stack.aclose()
                response = await stack.enter_async_context(self.upstream.stream(CHAT_PATH, body))
                if not response.is_success:
                    failed = await self.upstream.read_rest(response)
                    yield b"data: " + failed.body + b"\n\n"
                    return
            if stream.complete:
                await self._record(call, "".join(said))
            if stream.done:
                yield b"data: [DONE]\n\n"
        except UpstreamUnavailable as exc:
            yield b"data: " + exc.answer.body + b"\n\n"
        finally:
            await stack.aclose()

    async def _passed(
        self, response: httpx.Response, stream: ChatStream, own: OwnCalls | None
    ) -> AsyncIterator[bytes]:
        """One upstream stream's events for the client, up to (without) its `[DONE]`; the
        proxy's own calls and a finish that only they made are kept back."""
        splitter = SSESplitter()
        async for data in self.upstream.body_of(response):
            for event in splitter.feed(data):
                stream.observe(event)
                if stream.done:
                    return
                if own is None:
                    yield event
                    continue
                out = own.rewrite(event)
                if out is not None and not (stream.finish_reason and own.only_own(stream)):
                    yield out

    # -- recording ------------------------------------------------------------------------------
    async def _record(self, call: Call, answer: str | None) -> None:
        """Capture and offload the exchange; the answer waits at most `RECORD_WAIT_S` for it
        (the work goes on after that, and is waited for at shutdown)."""
        work = record(self.deps, call.tenant, call.session, call.messages, answer)
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
        await self.upstream.aclose()


def _is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


def _first_message(parsed: object) -> dict[str, Any] | None:
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def _own_calls(message: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") if message else None
    return [c for c in calls if tools.is_own(c)] if isinstance(calls, list) else []


def _call_count(message: Mapping[str, Any] | None) -> int:
    calls = message.get("tool_calls") if message else None
    return len(calls) if isinstance(calls, list) else 0


def _without_own_calls(answer: WholeAnswer, parsed: Any) -> WholeAnswer:
    """The answer without the proxy's calls (made beside the client's, or past the rounds)."""
    choice = parsed["choices"][0]
    kept = [c for c in choice["message"].get("tool_calls") or [] if not tools.is_own(c)]
    choice["message"]["tool_calls"] = kept
    if not kept:
        del choice["message"]["tool_calls"]
        choice["finish_reason"] = "stop"
    return WholeAnswer(answer.status, json.dumps(parsed).encode(), answer.headers)


def _streamed_message(stream: ChatStream, own: OwnCalls) -> dict[str, Any]:
    calls = [c.as_message_call() for i, c in sorted(stream.calls.items()) if i in own.own]
    return {"role": "assistant", "content": stream.answer or None, "tool_calls": calls}
