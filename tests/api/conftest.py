"""A service over a fresh store per test, reached through httpx (ASGI transport) or a socket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from stratamem.api import ServerSettings, Services, create_app
from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.proxy.settings import ProxySettings
from tests.stores import store_url

ADMIN_KEY = "admin-key-for-tests-0123456789abcdefghij"


@dataclass
class Caller:
    """A tenant with a live key: `headers` authenticate as it."""

    tenant: str
    token: str
    key_id: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def core_settings(tmp_path: Path, store_url: str | None = None) -> Settings:
    return Settings(
        data_dir=tmp_path / "data", embedder="hash:64", background_embedding=False,
        store_url=store_url,
    )  # fmt: skip


def open_services(
    tmp_path: Path,
    store_url: str | None = None,
    proxy: ProxySettings | None = None,
    **server: object,
) -> Services:
    settings = ServerSettings(**{"admin_key": ADMIN_KEY, **server})  # type: ignore[arg-type]
    memory = AsyncMemory.open(core_settings(tmp_path, store_url), clock=ManualClock(), llm=None)
    backend = SqliteBackend(tmp_path / "data" / "pipeline.db")
    return Services.over(memory, settings, backend, proxy_settings=proxy)


@pytest.fixture
async def services(
    request: pytest.FixtureRequest, store_kind: str, tmp_path: Path
) -> AsyncIterator[Services]:
    """Services over a fresh store: SQLite, then PostgreSQL (`tests/stores.py`)."""
    opened = open_services(tmp_path, store_url(request, store_kind, tmp_path))
    yield opened
    await opened.aclose()


@pytest.fixture
async def client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://stratamem.test") as c:
        yield c


async def new_caller(client: httpx.AsyncClient, tenant: str) -> Caller:
    created = await client.post("/v1/admin/tenants", json={"name": tenant}, headers=ADMIN)
    assert created.status_code == 201, created.text
    issued = await client.post(f"/v1/admin/tenants/{tenant}/keys", json={}, headers=ADMIN)
    assert issued.status_code == 201, issued.text
    body = issued.json()
    return Caller(tenant, body["token"], body["key_id"])


@pytest.fixture
async def alice(client: httpx.AsyncClient) -> Caller:
    return await new_caller(client, "alice")


@pytest.fixture
async def bob(client: httpx.AsyncClient) -> Caller:
    return await new_caller(client, "bob")


def message(text: str, role: str = "user", **extra: object) -> dict[str, object]:
    return {"role": role, "content": text, **extra}
