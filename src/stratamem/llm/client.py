"""The LLM client: any OpenAI-compatible chat endpoint, per-stage settings, JSON with a schema.

One call = one `complete_text` or `complete_json`. It retries 429/5xx (honouring Retry-After,
bounded), stops its HTTP request when its task is cancelled, counts calls and tokens per stage,
and for JSON: asks for a JSON-schema response format where the endpoint takes one (remembering
per endpoint and model when it does not), extracts JSON from prose or code fences otherwise,
validates it, and runs one repair round before raising `LLMOutputInvalid` with the raw replies.
"""

from __future__ import annotations

import asyncio
import json
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, RootModel, ValidationError

from stratamem.clock import Clock, SystemClock
from stratamem.httpretry import RetryPolicy, Sleep, parse_retry_after, send_with_retry
from stratamem.llm import wire
from stratamem.llm.errors import (
    LLMEmptyReply,
    LLMHTTPError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMReplyTruncated,
    LLMTimeout,
    LLMUnavailable,
)
from stratamem.llm.jsonparse import NoJSONFound, extract_json
from stratamem.llm.settings import LLMSettings, StageConfig
from stratamem.llm.usage import UsageMeter

M = TypeVar("M", bound=BaseModel)

_EXCERPT_CHARS = 500
_ERROR_CHARS = 2000


class _FormatRejected(Exception):
    """The endpoint answered 400 to a `response_format` (internal: triggers the fallback)."""


class _Unusable(Exception):
    """A reply that is empty, holds no JSON or fails validation (internal: triggers repair)."""


class LLMClient:
    """Calls chat models for the memory stages. Use `async with`, or call `aclose()`."""

    def __init__(
        self,
        settings: LLMSettings | None = None,
        *,
        meter: UsageMeter | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings or LLMSettings()
        self.usage = meter or UsageMeter()
        self._retry = RetryPolicy(
            max_attempts=self.settings.max_attempts,
            base_delay_s=self.settings.retry_base_delay_s,
            max_delay_s=self.settings.max_retry_delay_s,
        )
        self._sleep = sleep
        self._clock = clock
        self._owns_client = client is None
        self._http = client or httpx.AsyncClient()
        self._no_schema: set[tuple[str, str]] = set()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()

    async def complete_text(
        self, stage: str, messages: wire.Messages, *, max_tokens: int | None = None
    ) -> str:
        """The model's text reply; raises `LLMEmptyReply` when it has no content."""
        config = self.settings.for_stage(stage)
        content = await self._chat(config, messages, max_tokens=max_tokens)
        if not content.strip():
            raise LLMEmptyReply(f"stage {stage}: the model returned an empty reply", raw=content)
        return content

    async def complete_json(
        self,
        stage: str,
        messages: wire.Messages,
        schema: type[M],
        *,
        max_tokens: int | None = None,
    ) -> M:
        """The reply parsed and validated as `schema`, after at most one repair round."""
        config = self.settings.for_stage(stage)
        first = await self._json_call(config, messages, schema, max_tokens)
        try:
            return _validate(first, schema)
        except _Unusable as problem:
            retry = wire.repair_messages(messages, first, str(problem)[:_ERROR_CHARS])
        second = await self._json_call(config, retry, schema, max_tokens)
        try:
            return _validate(second, schema)
        except _Unusable as problem:
            kind = LLMEmptyReply if not second.strip() else LLMOutputInvalid
            message = f"stage {stage}: no valid {schema.__name__} after a repair round: {problem}"
            raise kind(message[:_ERROR_CHARS], raw=second, raws=(first, second)) from (
                problem.__cause__ or problem
            )

    def endpoint_takes_schema(self, config: StageConfig) -> bool:
        """Whether JSON-schema response formats are (still) sent to this endpoint and model."""
        return self.settings.json_schema and (config.base_url, config.model) not in self._no_schema

    async def _json_call(
        self,
        config: StageConfig,
        messages: wire.Messages,
        schema: type[BaseModel],
        max_tokens: int | None,
    ) -> str:
        if self.endpoint_takes_schema(config):
            try:
                return await self._chat(
                    config,
                    messages,
                    response_format=wire.schema_format(schema),
                    max_tokens=max_tokens,
                )
            except _FormatRejected:
                self._no_schema.add((config.base_url, config.model))
        hint = wire.SCHEMA_HINT.format(schema=json.dumps(schema.model_json_schema()))
        return await self._chat(
            config, wire.with_schema_hint(messages, hint), max_tokens=max_tokens
        )

    async def _chat(
        self,
        config: StageConfig,
        messages: wire.Messages,
        *,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        body = _request_body(config, messages, response_format, max_tokens)
        response = await self._post(config, body)
        if response_format and wire.rejects_response_format(response.status_code, response.text):
            raise _FormatRejected
        if not response.is_success:
            raise self._http_error(config, response)
        return self._read_reply(config, messages, response)

    def _http_error(self, config: StageConfig, response: httpx.Response) -> LLMHTTPError:
        message = (
            f"stage {config.stage}: {config.base_url} answered HTTP {response.status_code}: "
            f"{response.text[:_EXCERPT_CHARS]}"
        )
        status, body = response.status_code, response.text
        now_s = (self._clock or SystemClock()).now()
        asked_s = parse_retry_after(response.headers.get("retry-after"), now_s)
        if status == 429 or (status == 503 and asked_s is not None):
            return LLMRateLimited(message, status=status, body=body, retry_after_s=asked_s)
        return LLMHTTPError(message, status=status, body=body)

    async def _post(self, config: StageConfig, body: dict[str, Any]) -> httpx.Response:
        url = f"{config.base_url}/chat/completions"
        headers = {wire.STAGE_HEADER: config.stage}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"

        async def send() -> httpx.Response:
            self.usage.count_call(config.stage)
            return await self._http.post(url, json=body, headers=headers, timeout=config.timeout_s)

        try:
            return await send_with_retry(send, self._retry, sleep=self._sleep, clock=self._clock)
        except httpx.TimeoutException as e:
            raise LLMTimeout(
                f"stage {config.stage}: no answer from {url} within {config.timeout_s:g} s"
            ) from e
        except httpx.HTTPError as e:
            raise LLMUnavailable(f"stage {config.stage}: request to {url} failed: {e}") from e

    def _read_reply(
        self, config: StageConfig, messages: wire.Messages, response: httpx.Response
    ) -> str:
        try:
            reply = wire.ChatReply.model_validate_json(response.content)
        except ValidationError as e:
            raise LLMOutputInvalid(
                f"stage {config.stage}: the endpoint's reply is not a chat completion",
                raw=response.text,
            ) from e
        content = reply.content
        self._count_usage(config, messages, reply, content)
        if reply.choices[0].finish_reason == "length":
            raise LLMReplyTruncated(
                f"stage {config.stage}: the reply was cut off by the length limit after "
                f"{len(content)} characters",
                raw=content,
            )
        return content

    def _count_usage(
        self, config: StageConfig, messages: wire.Messages, reply: wire.ChatReply, content: str
    ) -> None:
        if reply.usage is not None:
            prompt, completion = reply.usage.prompt_tokens, reply.usage.completion_tokens
        else:
            prompt = wire.estimate_tokens(wire.prompt_chars(messages))
            completion = wire.estimate_tokens(len(content))
        self.usage.count_tokens(config.stage, prompt, completion)


def _request_body(
    config: StageConfig,
    messages: wire.Messages,
    response_format: dict[str, Any] | None,
    max_tokens: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": config.model, "messages": [dict(m) for m in messages]}
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if response_format is not None:
        body["response_format"] = response_format
    return body


def _validate(content: str, schema: type[M]) -> M:
    """`content` as a `schema` instance, or `_Unusable` saying what is wrong (cause chained)."""
    if not content.strip():
        raise _Unusable("the reply was empty")
    try:
        value = extract_json(content, prefer_object=not issubclass(schema, RootModel))
    except NoJSONFound as e:
        raise _Unusable(str(e)) from e
    try:
        return schema.model_validate(value)
    except ValidationError as e:
        raise _Unusable(f"the JSON does not match the schema: {e}") from e
