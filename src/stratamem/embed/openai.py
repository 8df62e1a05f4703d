"""Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, Ollama, TEI, llama.cpp …).

The dimension is given or discovered from the first reply; a reply of another width later is an
error, never silently stored. 429 and 5xx are retried honouring Retry-After, with an injected
sleep and clock so tests never wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ValidationError

from stratamem.clock import Clock, SystemClock
from stratamem.embed.base import Vectors, check_texts, empty, normalise_rows
from stratamem.errors import EmbeddingError
from stratamem.httpretry import RetryPolicy, Sleep, redact_url, redact_urls, send_with_retry

DEFAULT_BATCH_SIZE = 64
DEFAULT_TIMEOUT_S = 30.0
_PROBE_TEXT = "dimension probe"
_BODY_EXCERPT_CHARS = 300


class _Item(BaseModel):
    index: int
    embedding: list[float]


class _Reply(BaseModel):
    data: list[_Item]


class OpenAIEmbedder:
    """`Embedder` over HTTP; `model` is the endpoint's model name, e.g. `text-embedding-3-small`.

    `base_url` is the API root including `/v1` (for example `http://127.0.0.1:11434/v1`).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not model:
            raise ValueError("an embedding model name is required")
        if batch_size < 1 or timeout_s <= 0:
            raise ValueError("batch_size must be >= 1 and timeout_s > 0")
        self._model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        self._shown = redact_url(self._url)  # in errors: no credential, path or query
        self._dim = dim
        self._batch_size = batch_size
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._clock = clock or SystemClock()
        self._owns_client = client is None
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout_s)
        self._client = client or httpx.AsyncClient()

    @property
    def model(self) -> str:
        return self._model

    @property
    def dim(self) -> int:
        """The vector width; raises `EmbeddingError` until it is given or discovered."""
        if self._dim is None:
            raise EmbeddingError(
                f"the dimension of {self._model} is not known yet: pass dim= or call discover_dim()"
            )
        return self._dim

    async def discover_dim(self) -> int:
        """Embed a probe text if needed, and return the endpoint's vector width."""
        if self._dim is None:
            await self._embed_batch([_PROBE_TEXT])
        return self.dim

    async def embed(self, texts: Sequence[str]) -> Vectors:
        items = check_texts(texts)
        if not items:
            return empty(await self.discover_dim())
        batches = [
            await self._embed_batch(items[i : i + self._batch_size])
            for i in range(0, len(items), self._batch_size)
        ]
        return np.concatenate(batches, axis=0)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def _embed_batch(self, texts: list[str]) -> Vectors:
        response = await self._post({"model": self._model, "input": texts})
        rows = self._parse(response, expected=len(texts))
        self._check_dim(rows.shape[1])
        return normalise_rows(rows, source=f"the endpoint {self._shown}")

    async def _post(self, body: dict[str, object]) -> httpx.Response:
        async def send() -> httpx.Response:
            return await self._client.post(
                self._url, json=body, headers=self._headers, timeout=self._timeout
            )

        try:
            response = await send_with_retry(
                send, self._retry, sleep=self._sleep, clock=self._clock
            )
        except httpx.TimeoutException as e:
            raise EmbeddingError(f"embedding request to {self._shown} timed out") from e
        except httpx.HTTPError as e:
            raise EmbeddingError(
                f"embedding request to {self._shown} failed: {redact_urls(str(e))}"
            ) from e
        if not response.is_success:
            excerpt = redact_urls(response.text[:_BODY_EXCERPT_CHARS])
            raise EmbeddingError(
                f"embedding endpoint {self._shown} answered HTTP {response.status_code}: {excerpt}"
            )
        return response

    def _parse(self, response: httpx.Response, *, expected: int) -> npt.NDArray[np.float64]:
        try:
            reply = _Reply.model_validate_json(response.content)
        except ValidationError as e:
            excerpt = redact_urls(response.text[:_BODY_EXCERPT_CHARS])
            raise EmbeddingError(
                f"embedding endpoint {self._shown} sent a malformed reply: {excerpt!r}"
            ) from e
        ordered = sorted(reply.data, key=lambda item: item.index)
        if [item.index for item in ordered] != list(range(expected)):
            raise EmbeddingError(
                f"embedding endpoint {self._shown} returned {len(ordered)} vectors with indices "
                f"{[item.index for item in ordered][:10]}, expected 0..{expected - 1}"
            )
        widths = {len(item.embedding) for item in ordered}
        if len(widths) != 1 or 0 in widths:
            raise EmbeddingError(
                f"embedding endpoint {self._shown} returned vectors of widths {sorted(widths)}"
            )
        return np.asarray([item.embedding for item in ordered], dtype=np.float64)

    def _check_dim(self, width: int) -> None:
        if self._dim is None:
            self._dim = width
        elif width != self._dim:
            raise EmbeddingError(
                f"embedding endpoint {self._shown} changed dimension from {self._dim} to {width} "
                f"for model {self._model}; vectors of different widths cannot share an index"
            )
