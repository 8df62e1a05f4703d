"""The LLM client: any OpenAI-compatible chat endpoint, per-stage settings, JSON with a schema.

One call = one `complete_text` or `complete_json`. Every request is bounded: `max_tokens` (the
call's, else the stage's setting), a deadline that cancels the request and closes its
connection, and a circuit breaker per endpoint (`llm.breaker`). It retries 429/5xx (honouring
Retry-After, bounded); what still fails in transport, in time or with a 5xx is endpoint trouble
(`LLMEndpointTrouble`: counted by the breaker, the work postponed, never the reply's fault). It
stops its HTTP request when its task is cancelled, counts calls, tokens and outcomes per stage,
and for JSON: asks the endpoint's way for JSON following the schema (`llm.profiles`, learned
from refusals unless configured), reads the reply strictly as one JSON value
(`llm.jsonparse`), validates it, and runs one repair round before raising `LLMOutputInvalid`
with the raw replies. A reply cut off by the length limit is never read.
"""

from __future__ import annotations

import asyncio
import json
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from stratamem.clock import Clock, SystemClock
from stratamem.httpretry import (
    RetryPolicy,
    Sleep,
    parse_retry_after,
    redact_url,
    redact_urls,
    scrub_reply,
    send_with_retry,
)
from stratamem.llm import profiles, wire
from stratamem.llm.breaker import CircuitBreaker
from stratamem.llm.errors import (
    LLMEmptyReply,
    LLMHTTPError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMReplyTruncated,
    LLMServerError,
    LLMTimeout,
    LLMUnavailable,
    names_endpoint_trouble,
)
from stratamem.llm.jsonparse import NoJSONFound, extract_json
from stratamem.llm.profiles import Profile, ProfileMemory
from stratamem.llm.settings import LLMSettings, StageConfig
from stratamem.llm.usage import UsageMeter

M = TypeVar("M", bound=BaseModel)

_EXCERPT_CHARS = 500
_ERROR_CHARS = 2000


_SERVER_TROUBLE = frozenset({500, 502, 504})
"""Answers of a server (or of a proxy whose upstream is gone) in trouble: they count against the
breaker like a refused connection (so does a 503 that does not ask to wait), and postpone the
work (`LLMServerError`)."""


class _FormatRejected(Exception):
    """The endpoint refused the structured-output form it was sent (internal: the client
    moves to the next profile)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.status = response.status_code
        self.body = response.text


class _Unusable(Exception):
    """A reply that is empty, not one JSON value, or fails validation (internal: repair)."""


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
        self.profiles = ProfileMemory(self.settings.structured_profile)
        self._answered_at: float | None = None
        self.breaker = CircuitBreaker(
            self.settings.breaker_failures,
            self.settings.breaker_cooldown_s,
            clock or SystemClock(),
        )

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
        with self.usage.stage_call(stage):
            content = await self._chat(config, messages, max_tokens or config.max_tokens)
            if not content.strip():
                raise LLMEmptyReply(
                    f"stage {stage}: the model returned an empty reply", raw=content
                )
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
        bound = max_tokens or config.max_tokens
        with self.usage.stage_call(stage):
            first = await self._json_call(config, messages, schema, bound)
            try:
                return _validate(first, schema)
            except _Unusable as problem:
                retry = wire.repair_messages(messages, first, str(problem)[:_ERROR_CHARS])
            self.usage.note_repair()
            second = await self._json_call(config, retry, schema, bound)
            try:
                return _validate(second, schema)
            except _Unusable as problem:
                kind = LLMEmptyReply if not second.strip() else LLMOutputInvalid
                message = (
                    f"stage {stage}: no valid {schema.__name__} after a repair round: {problem}"
                )
                raise kind(message[:_ERROR_CHARS], raw=second, raws=(first, second)) from (
                    problem.__cause__ or problem
                )

    def profile_for(self, config: StageConfig) -> Profile:
        """How JSON is asked of this stage's endpoint and model now (configured or learned)."""
        return self.profiles.current(config.base_url, config.model)

    def endpoint_takes_schema(self, config: StageConfig) -> bool:
        """Whether a structured-output field is (still) sent to this endpoint and model."""
        return self.profile_for(config) != "prompt"

    async def _json_call(
        self, config: StageConfig, messages: wire.Messages, schema: type[BaseModel], bound: int
    ) -> str:
        profile = self.profile_for(config)
        while True:
            sent = messages
            if profile == "prompt":
                hint = wire.SCHEMA_HINT.format(schema=json.dumps(wire.compact_schema(schema)))
                sent = wire.with_schema_hint(messages, hint)
            try:
                fields = profiles.format_fields(profile, schema)
                return await self._chat(config, sent, bound, fields, profile)
            except _FormatRejected as refusal:
                following = self.profiles.refused(config.base_url, config.model, profile)
                if following is None:
                    raise self._refused(config, profile, refusal) from refusal
                profile = following

    def _refused(
        self, config: StageConfig, profile: Profile, refusal: _FormatRejected
    ) -> LLMHTTPError:
        return LLMHTTPError(
            f"stage {config.stage}: {redact_url(config.base_url)} refused the `{profile}`"
            f" structured-output form (HTTP {refusal.status}:"
            f" {_excerpt(config, refusal.body)}); set STRATAMEM_LLM_STRUCTURED to"
            " another profile, or to auto",
            status=refusal.status,
            body=scrub_reply(refusal.body, config.base_url, config.api_key),
        )

    async def _chat(
        self,
        config: StageConfig,
        messages: wire.Messages,
        max_tokens: int,
        fields: dict[str, Any] | None = None,
        profile: Profile | None = None,
    ) -> str:
        body = _request_body(config, messages, fields or {}, max_tokens)
        response = await self._post(config, body, profile if fields else None)
        if not response.is_success:
            raise self._http_error(config, response)
        return self._read_reply(config, messages, response)

    def _http_error(self, config: StageConfig, response: httpx.Response) -> LLMHTTPError:
        message = (
            f"stage {config.stage}: {redact_url(config.base_url)} answered HTTP"
            f" {response.status_code}: {_excerpt(config, response.text)}"
        )
        status = response.status_code
        body = scrub_reply(response.text, config.base_url, config.api_key)  # kept in records
        asked_s = parse_retry_after(response.headers.get("retry-after"), self._now())
        if status == 429 or (status == 503 and asked_s is not None):
            return LLMRateLimited(message, status=status, body=body, retry_after_s=asked_s)
        if _server_trouble(response):
            return LLMServerError(message, status=status, body=body,
                                  retry_after_s=self.breaker.cooldown_s)  # fmt: skip
        return LLMHTTPError(message, status=status, body=body)

    def _now(self) -> float:
        return (self._clock or SystemClock()).now()

    async def _post(
        self, config: StageConfig, body: dict[str, Any], profile: Profile | None
    ) -> httpx.Response:
        """Send under the endpoint's breaker; a refusal of `profile`'s format raises
        `_FormatRejected` at once (not retried)."""
        url = f"{config.base_url}/chat/completions"
        headers = {wire.STAGE_HEADER: config.stage}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"

        async def send() -> httpx.Response:
            self.usage.count_call(config.stage)
            async with asyncio.timeout(config.timeout_s):  # cancels the request: closes it
                response = await self._http.post(
                    url, json=body, headers=headers, timeout=config.timeout_s
                )
            if profile is not None and profiles.refuses(
                profile, response.status_code, response.text
            ):
                raise _FormatRejected(response)
            return response

        probe = self.breaker.admit(config.base_url)
        up: bool | None = None
        try:
            response = await send_with_retry(
                send, self._retry, sleep=self._sleep, clock=self._clock
            )
            up = not _server_trouble(response)
            return response
        except _FormatRejected:
            up = True
            raise
        except (httpx.TimeoutException, TimeoutError) as e:
            up = False
            raise LLMTimeout(
                f"stage {config.stage}: no answer from {redact_url(url)} within"
                f" {config.timeout_s:g} s",
                retry_after_s=self.breaker.cooldown_s,
            ) from e
        except httpx.HTTPError as e:
            up = False
            raise LLMUnavailable(
                f"stage {config.stage}: request to {redact_url(url)} failed:"
                f" {redact_urls(str(e)) or type(e).__name__}",
                retry_after_s=self.breaker.cooldown_s,
            ) from e
        finally:
            self._report(config.base_url, up, probe)

    def answered_at(self) -> float | None:
        """When an endpoint last answered a call (not in trouble); None: none has yet."""
        return self._answered_at

    def explains(self, error: str) -> bool:
        """Whether a dead letter's error is endpoint trouble (`names_endpoint_trouble`): the
        worker requeues it once an endpoint answers again (`pipeline.executors.ServiceHealth`)."""
        return names_endpoint_trouble(error)

    def _report(self, endpoint: str, up: bool | None, probe: bool) -> None:
        if up is True:
            self._answered_at = self._now()
            self.breaker.succeeded(endpoint)
        elif up is False:
            self.breaker.failed(endpoint)
        elif probe:
            self.breaker.abandon(endpoint)

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


def _excerpt(config: StageConfig, reply: str) -> str:
    """The start of an endpoint's error reply, fit to quote in an error (`scrub_reply`)."""
    return scrub_reply(reply[:_EXCERPT_CHARS], config.base_url, config.api_key)


def _server_trouble(response: httpx.Response) -> bool:
    status = response.status_code
    return status in _SERVER_TROUBLE or (status == 503 and "retry-after" not in response.headers)


def _request_body(
    config: StageConfig, messages: wire.Messages, fields: dict[str, Any], max_tokens: int
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": config.model, "messages": [dict(m) for m in messages]}
    if config.temperature is not None:
        body["temperature"] = config.temperature
    body["max_tokens"] = max_tokens
    body.update(fields)
    return body


def _validate(content: str, schema: type[M]) -> M:
    """`content` as a `schema` instance, or `_Unusable` saying what is wrong (cause chained)."""
    if not content.strip():
        raise _Unusable("the reply was empty")
    try:
        value = extract_json(content)
    except NoJSONFound as e:
        raise _Unusable(str(e)) from e
    try:
        return schema.model_validate(value)
    except ValidationError as e:
        raise _Unusable(f"the JSON does not match the schema: {e}") from e
