"""The memory proxy on a real socket, in front of the scripted OpenAI-compatible server, called
with the real `openai` package (and httpx where a test needs the raw answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from stratamem.api import ServerSettings, Services, create_app
from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope, Turn
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.proxy import ProxySettings
from stratamem.testing import ScriptedLLM
from tests.api.conftest import ADMIN_KEY
from tests.api.live import live

UPSTREAM_KEY = "upstream-key-of-the-proxy"
#: httpx's default of 5 s is short on a machine shared by several test runs.
HTTP_TIMEOUT_S = 60.0
HTTP = httpx.Client(timeout=HTTP_TIMEOUT_S)
"""The tests' own HTTP calls (besides the SDKs')."""


@dataclass
class Proxied:
    """A running service with its proxy in front of `upstream`, and one tenant's key."""

    services: Services
    upstream: ScriptedLLM
    url: str
    tenant: str
    key: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/openai/v1"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def client(self, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=self.key, max_retries=0, **options)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=f"{self.url}/anthropic", api_key=self.key,
                                   max_retries=0)  # fmt: skip

    def turns(self, session: str) -> list[Turn]:
        return self.services.memory.store.list_turns(Scope(self.tenant), session, limit=1000)

    def said(self, session: str) -> list[tuple[str, str]]:
        return [(t.role.value, t.text) for t in self.turns(session)]

    def metric(self, name: str) -> int:
        text = HTTP.get(f"{self.url}/metrics").text
        for line in text.splitlines():
            if line.startswith(f"stratamem_{name}_total "):
                return int(line.split()[1])
        return 0

    def run(self, work: Any) -> Any:
        """Run a coroutine of the services on its own loop (the server runs on another)."""
        return asyncio.run(work)


def memory_settings(tmp_path: Path, **core: Any) -> Settings:
    values: dict[str, Any] = {"data_dir": tmp_path / "data", "embedder": "hash:64",
                              "background_embedding": False, **core}  # fmt: skip
    return Settings(**values)


def open_proxied_services(
    tmp_path: Path,
    behind: ScriptedLLM,
    *,
    core: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    **proxy: Any,
) -> Services:
    memory = AsyncMemory.open(memory_settings(tmp_path, **(core or {})), clock=ManualClock(),
                              llm=None)  # fmt: skip
    settings = ProxySettings(**{
        "upstream": behind.base_url, "upstream_key": UPSTREAM_KEY,
        "anthropic_upstream": behind.base_url, "anthropic_upstream_key": UPSTREAM_KEY, **proxy,
    })  # fmt: skip
    return Services.over(
        memory, ServerSettings(**{"admin_key": ADMIN_KEY, **(server or {})}),
        SqliteBackend(tmp_path / "data" / "pipeline.db"), proxy_settings=settings,
    )  # fmt: skip


@contextmanager
def serving(services: Services, upstream: ScriptedLLM, tenant: str = "maya") -> Iterator[Proxied]:
    """`services` on a free port, with `tenant` and a key of it made over the admin routes."""
    with live(create_app(services)) as url:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        made = HTTP.post(f"{url}/v1/admin/tenants", json={"name": tenant}, headers=admin)
        assert made.status_code == 201, made.text
        issued = HTTP.post(f"{url}/v1/admin/tenants/{tenant}/keys", json={}, headers=admin)
        yield Proxied(services, upstream, url, tenant, issued.json()["token"])


ProxyFactory = Callable[..., Proxied]


@pytest.fixture
def make_proxied(tmp_path: Path, scripted_llm: ScriptedLLM) -> Iterator[ProxyFactory]:
    """`make_proxied(**proxy_settings)`: the proxy in front of the scripted server (or the one
    `behind=` names), over a SQLite store; `core=`, `server=` change those settings."""
    with ExitStack() as stack:

        def make(
            behind: ScriptedLLM = scripted_llm,
            core: dict[str, Any] | None = None,
            server: dict[str, Any] | None = None,
            **proxy: Any,
        ) -> Proxied:
            services = open_proxied_services(tmp_path, behind, core=core, server=server,
                                             **proxy)  # fmt: skip
            stack.callback(lambda: asyncio.run(services.aclose()))
            return stack.enter_context(serving(services, behind))

        yield make


@pytest.fixture
def proxied(make_proxied: ProxyFactory) -> Proxied:
    """The proxy in front of the scripted server, over a SQLite store."""
    return make_proxied()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}
