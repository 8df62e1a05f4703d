"""`stratamem.client`: the tenant check, typed errors from the one error shape, retries that
honour Retry-After, timeouts, and the synchronous `Client` on a real socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from stratamem.api import Services, create_app
from stratamem.api.errors import STATUS_OF_ERROR, TYPE_OF_STATUS
from stratamem.api.server import bind
from stratamem.client import AsyncClient, Client, RetryPolicy
from stratamem.client.errors import ERROR_OF_STATUS, ERROR_OF_TYPE
from stratamem.errors import (
    ConfigError,
    Forbidden,
    InvalidInput,
    MemoryChanged,
    NotFound,
    StoreError,
    StratamemError,
    Throttled,
    Unauthenticated,
    Unreachable,
)
from tests.api.conftest import ADMIN
from tests.api.live import live

ALICE = {"tenant": "alice"}


@pytest.fixture
async def asgi(services: Services) -> AsyncIterator[httpx.ASGITransport]:
    yield httpx.ASGITransport(app=create_app(services))


class Script:
    """A server that answers from a list, recording each request and each wait of the client."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.waits: list[float] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/v1/whoami":
            return httpx.Response(200, json=ALICE)
        return self.answers.pop(0)

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)

    def client(self, **options: object) -> AsyncClient:
        return AsyncClient("http://s.test", "k", transport=httpx.MockTransport(self.handle),
                           sleep=self.sleep, **options)  # type: ignore[arg-type]  # fmt: skip


def _error(status: int, kind: str, retry_after: str | None = None) -> httpx.Response:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    body = {"error": {"type": kind, "message": f"{kind} happened"}}
    return httpx.Response(status, json=body, headers=headers)


STATS = httpx.Response(200, json={"L0": {"records": 1}})


async def test_a_call_for_another_tenant_is_refused_before_it_is_sent() -> None:
    script = Script()
    async with script.client() as client:
        with pytest.raises(Forbidden, match="belongs to tenant 'alice', not 'bob'"):
            await client.stats("bob")
    assert [r.url.path for r in script.requests] == ["/v1/whoami"]


async def test_429_and_503_are_retried_after_the_wait_the_service_asked_for() -> None:
    script = Script(_error(429, "rate_limited", "2"), _error(503, "pipeline_unavailable", "1.5"),
                    STATS)  # fmt: skip
    async with script.client() as client:
        assert await client.stats("alice") == {"L0": {"records": 1}}
    assert script.waits == [2.0, 1.5]
    assert len(script.requests) == 4  # whoami, then three tries of /v1/stats


async def test_throttled_when_the_wait_asked_for_is_longer_than_the_policy_allows() -> None:
    script = Script(_error(429, "rate_limited", "120"))
    async with script.client(retry=RetryPolicy(max_delay_s=30)) as client:
        with pytest.raises(Throttled) as caught:
            await client.stats("alice")
    assert caught.value.retry_after_s == 120.0 and script.waits == []


async def test_other_errors_are_not_retried_and_keep_their_type() -> None:
    script = Script(_error(500, "store_error"), _error(404, "not_found"))
    async with script.client() as client:
        with pytest.raises(StoreError, match=r"store_error happened \(GET /v1/stats → 500"):
            await client.stats("alice")
        with pytest.raises(NotFound):
            await client.get_memory("alice", "m_1")
    assert script.waits == []


async def test_an_answer_that_is_not_the_error_shape_still_raises_by_status() -> None:
    script = Script(httpx.Response(404, text="<html>no</html>"))
    async with script.client() as client:
        with pytest.raises(NotFound, match="no"):
            await client.get_memory("alice", "m_1")


async def test_no_key_unknown_key_and_no_server(asgi: httpx.ASGITransport) -> None:
    with pytest.raises(ConfigError, match="STRATAMEM_KEY"):
        AsyncClient("http://s.test", "")
    async with AsyncClient("http://s.test", "smk_unknown", transport=asgi) as client:
        with pytest.raises(Unauthenticated):
            await client.tenant()
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    async with AsyncClient(f"http://127.0.0.1:{port}", "k", timeout_s=2) as client:
        with pytest.raises(Unreachable, match="unreachable"):
            await client.tenant()


async def test_a_timeout_is_unreachable_not_a_hang() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    async with AsyncClient("http://s.test", "k", transport=httpx.MockTransport(slow),
                           timeout_s=0.5) as client:  # fmt: skip
        with pytest.raises(Unreachable, match=r"no answer within 0\.5s"):
            await client.tenant()


def test_the_client_error_table_inverts_the_service_table() -> None:
    for family, status, kind in STATUS_OF_ERROR:
        raised = ERROR_OF_TYPE[kind]  # every type the service sends is known
        same_kind = [f for f, _, k in STATUS_OF_ERROR if k == kind]
        assert raised is same_kind[0] and issubclass(family, StratamemError), kind
        assert status in ERROR_OF_STATUS or status >= 500
    for status, kind in TYPE_OF_STATUS.items():
        assert kind in ERROR_OF_TYPE or status == 405, kind
    assert ERROR_OF_TYPE["conflict"] is MemoryChanged  # a memory edited meanwhile
    assert ERROR_OF_TYPE["not_found"] is NotFound and ERROR_OF_TYPE["cors_refused"] is InvalidInput
    assert TYPE_OF_STATUS[400] == "bad_request"


def test_the_synchronous_client_on_a_real_socket(services: Services) -> None:
    app = create_app(services)
    with live(app) as url:
        created = httpx.post(f"{url}/v1/admin/tenants", json={"name": "maya"}, headers=ADMIN)
        assert created.status_code == 201
        issued = httpx.post(f"{url}/v1/admin/tenants/maya/keys", json={}, headers=ADMIN)
        with Client(url, issued.json()["token"]) as memory:
            assert memory.tenant() == "maya"
            captured = memory.capture("maya", "s1", [{"role": "user", "content": "I fly kites"}])
            hits = memory.search("maya", "kites", k=3)
            stated = memory.add_memory("maya", "Flies kites on Sundays", type="episodic")
            assert memory.get_memory("maya", stated.id) == stated
    assert hits[0].id == captured.ids[0] and hits[0].text == "I fly kites"
    assert json.loads(json.dumps(captured.to_json()))["stored"] == captured.ids




async def test_a_bulk_retry_sends_its_filters() -> None:
    done = {"retried": 1, "resolved": ["f_1"], "still_open": [], "skipped": [], "failed": {}}
    script = Script(httpx.Response(200, json=done))
    async with script.client() as client:
        assert await client.retry_failures("alice", session="s1", kind="quarantine") == done
    sent = script.requests[-1]
    assert (sent.method, sent.url.path) == ("POST", "/v1/failures/retry")
    assert dict(sent.url.params) == {"session": "s1", "kind": "quarantine"}
