"""An upstream model endpoint: requests with the proxy's own key (never the tenant's), whole
answers or an open stream, and transport failures as 502 / 504 answers in the API's error shape.
The client is a tenant: an answer names no internal address (the log names the upstream by
scheme, host and port), and an error body the upstream sends has the proxy's key cut out."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from stratamem.errors import StratamemError
from stratamem.httpretry import redact_url, scrub_reply
from stratamem.proxy.answers import WholeAnswer, upstream_error

log = logging.getLogger("stratamem.proxy")

CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 100
ErrorShape = Callable[[int, str, str], WholeAnswer]
"""An error answer in an API's shape, from its status, type and message."""


class UpstreamUnavailable(StratamemError):
    """The upstream could not be reached or did not answer in time (or is not configured);
    `answer` says so to the client, with the status: the proxy answers it, never raises it."""

    def __init__(self, answer: WholeAnswer) -> None:
        super().__init__(answer.body.decode())
        self.answer = answer


class Upstream:
    """One upstream base URL (including `/v1`) and the headers that authenticate the proxy
    there; the HTTP client opens on first use. `error` shapes the answers this side makes, and
    `setting` is the variable that names the base URL (for the answer when it is unset)."""

    def __init__(
        self,
        base_url: str | None,
        auth: Mapping[str, str],
        timeout_s: float,
        error: ErrorShape,
        setting: str = "STRATAMEM_PROXY_UPSTREAM",
    ) -> None:
        self.base_url = base_url
        self.auth = dict(auth)
        self.timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        self.error = error
        self.setting = setting
        self._client: httpx.AsyncClient | None = None

    @property
    def configured(self) -> bool:
        return self.base_url is not None

    @property
    def name(self) -> str:
        """The upstream as an operator's log names it."""
        return redact_url(self.base_url) if self.base_url else "no upstream"

    def unconfigured(self) -> WholeAnswer:
        return self.error(
            503, "proxy_not_configured",
            f"the memory proxy has no upstream for this API: set {self.setting} to the base URL"
            " of the model to forward to (with /v1) and restart serve",
        )  # fmt: skip

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=MAX_CONNECTIONS)
            self._client = httpx.AsyncClient(timeout=self.timeout, limits=limits, trust_env=False)
        return self._client

    def _url(self, path: str) -> str:
        if self.base_url is None:
            raise UpstreamUnavailable(self.unconfigured())
        return f"{self.base_url}{path}"

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return {**(extra or {}), **self.auth}

    async def get(self, path: str, headers: Mapping[str, str] | None = None) -> WholeAnswer:
        with self._failures():
            response = await self._http().get(self._url(path), headers=self._headers(headers))
        return self._whole(response)

    async def post(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> WholeAnswer:
        sent = {**self._headers(headers), "Content-Type": "application/json"}
        with self._failures():
            response = await self._http().post(self._url(path), content=encoded(body), headers=sent)
        return self._whole(response)

    @asynccontextmanager
    async def stream(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[httpx.Response]:
        """The upstream's response, open: its body not read yet (closed on exit)."""
        sent = {**self._headers(headers), "Accept": "text/event-stream",
                "Accept-Encoding": "identity", "Content-Type": "application/json"}  # fmt: skip
        request = self._http().build_request(
            "POST", self._url(path), content=encoded(body), headers=sent
        )
        with self._failures():
            response = await self._http().send(request, stream=True)
        try:
            yield response
        finally:
            await response.aclose()

    async def body_of(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """A streamed response's bytes as they arrive."""
        with self._failures():
            async for data in response.aiter_bytes():
                yield data

    async def read_rest(self, response: httpx.Response) -> WholeAnswer:
        """A streamed response read whole (an error, or a server that did not stream)."""
        with self._failures():
            await response.aread()
        return self._whole(response)

    def _whole(self, response: httpx.Response) -> WholeAnswer:
        if response.is_success:
            media = response.headers.get("content-type", "application/json")
            return WholeAnswer(response.status_code, response.content, media_type=media)
        body = response.content
        secrets = [v.removeprefix("Bearer ") for v in self.auth.values()]
        scrubbed = scrub_reply(body.decode("utf-8", "replace"), self.base_url or "", *secrets)
        if scrubbed != body.decode("utf-8", "replace"):
            body = scrubbed.encode()
        return upstream_error(response.status_code, body, response.headers, self.error)

    def _failures(self) -> _Failures:
        return _Failures(self.name, self.error)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class _Failures:
    """Turns httpx's transport errors into `UpstreamUnavailable` (504 on a timeout, else 502)."""

    def __init__(self, name: str, error: ErrorShape) -> None:
        self.name, self.error = name, error

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:  # fmt: skip
        if isinstance(exc, httpx.TimeoutException):
            log.warning("proxy: %s did not answer in time (%s)", self.name, type(exc).__name__)
            message = f"the upstream did not answer in time ({type(exc).__name__})"
            raise UpstreamUnavailable(self.error(504, "upstream_timeout", message)) from exc
        if isinstance(exc, httpx.TransportError):
            log.warning("proxy: %s could not be reached (%s)", self.name, type(exc).__name__)
            message = f"the upstream could not be reached ({type(exc).__name__})"
            raise UpstreamUnavailable(self.error(502, "upstream_unreachable", message)) from exc


def encoded(body: Mapping[str, Any]) -> bytes:
    """The request as JSON, as the client sent it: text that is not Unicode (a lone surrogate,
    which JSON can carry escaped) stays escaped instead of failing the call here."""
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body).encode("ascii")
