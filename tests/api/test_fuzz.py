"""The OpenAPI document fuzzed with schemathesis over a real socket: no 5xx, ever; answers match
their documented status codes and schemas; invalid data is rejected. Then properties of hostile
input (times, Unicode with lone surrogates, NUL, direction marks and NFC/NFD forms, nesting
depth) over REST and the MCP tools.

(Hypothesis drives each operation directly: schemathesis' pytest plugin does not run under the
pytest this project uses.)
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from stratamem.api import create_app
from stratamem.proxy.settings import ProxySettings
from stratamem.testing import Reply, ScriptedLLM
from tests.api.conftest import ADMIN_KEY, open_services
from tests.api.live import live

pytestmark = pytest.mark.slow
EXAMPLES_PER_OPERATION = 25
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The service, its memory proxy in front of a scripted upstream that answers anything."""
    with ScriptedLLM(handler=lambda request: Reply.text("ok")) as upstream:
        proxy = ProxySettings(upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
        services = open_services(Path(tmp_path_factory.mktemp("fuzz")), proxy=proxy)
        services.tenants.create_tenant("fuzz")
        token = services.tenants.create_key("fuzz").token
        with live(create_app(services, close_on_shutdown=True)) as url:
            yield url, token


def _fuzz(url: str, token: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 20
    if mode is GenerationMode.NEGATIVE:  # an operation without inputs has no invalid request
        with_inputs = _operations_with_inputs(httpx.get(f"{url}/openapi.json").json())
        operations = [o for o in operations if (o.method.upper(), o.path) in with_inputs]
        assert len(operations) > 10

    for operation in operations:
        key = ADMIN_KEY if operation.path.startswith("/v1/admin") else token
        checks = CHECKS
        if mode is GenerationMode.NEGATIVE and operation.method.upper() == "POST":
            checks = [*CHECKS, invalid_body_rejection]
        _fuzz_operation(operation, url, key, mode, checks)


def invalid_body_rejection(ctx: CheckContext, response: Any, case: Case) -> bool | None:
    """Invalid bodies must be refused: `negative_data_rejection`, for the cases whose body is
    what schemathesis made invalid. A case invalid only outside its body is not a finding here:
    a missing Authorization header is put back by this test, an unknown query parameter is
    ignored (as HTTP APIs do), and in a query string "0" is both the number schemathesis meant
    as invalid and a valid session name."""
    body = case.meta.components.get(ParameterLocation.BODY) if case.meta else None
    if body is None or not body.mode.is_negative:
        return None
    return negative_data_rejection(ctx, response, case)


def _operations_with_inputs(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if operation.get("parameters") or operation.get("requestBody")
    }


def _fuzz_operation(
    operation: APIOperation, url: str, key: str, mode: GenerationMode, checks: list[Any]
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def check(case: Case) -> None:
        case.call_and_validate(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, checks=checks
        )

    check()


def test_valid_requests_never_get_a_server_error(service: tuple[str, str]) -> None:
    _fuzz(*service, GenerationMode.POSITIVE)


def test_invalid_requests_are_rejected_without_a_server_error(service: tuple[str, str]) -> None:
    _fuzz(*service, GenerationMode.NEGATIVE)


# -- properties of hostile input: times, Unicode, nesting; over REST and the MCP tools ------
PROPERTY_EXAMPLES = 40
MIN_TS, MAX_TS = -2_208_988_800.0, 7_258_118_400.0  # the documented range: 1900 .. 2200 UTC
MAX_NESTING = 32
UNICODE = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),  # any code point, lone surrogates included
        st.sampled_from(  # NUL, direction marks, a decomposable letter, lone surrogates
            ["\x00", "\u200f", "\u202e", "\u202c", "e", "\u0301", "\u00e9", "\ud800", "\udfff"]
        ),
    ),
    min_size=1,
    max_size=40,
)
OFFSETS = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                           timezone(timedelta(hours=-8)), None])  # fmt: skip
RFC3339 = st.datetimes(timezones=OFFSETS).map(lambda d: d.isoformat())
NOT_RFC3339 = st.one_of(
    st.sampled_from([
        "20240101", "2024-W01-1", "2024-001", "2024-01-01T10:00", "2024-01-01T10",
        "2024-01-01T10:00:00+05:30:15", "2024-01-01T10:00:00.1234567890Z", "2024-1-1",
        "2024-01-01 " + "0" * 100_000, "2024-01-01" + "0" * 100_000, "1e3", "now", "",
        "2024-01-01T10:00:00Z junk", "+002024-01-01", "2024-02-30", "2024-01-01T24:00:00",
    ]),
    st.text(max_size=30).filter(lambda t: not t.strip()[:4].isdigit()),
)  # fmt: skip
TIMES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(min_value=MIN_TS, max_value=MAX_TS),
    RFC3339,
)


def property_settings(test: Any) -> Any:
    return settings(max_examples=PROPERTY_EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))(test)  # fmt: skip


def post_raw(url: str, token: str, path: str, body: Any, **headers: str) -> httpx.Response:
    """`body` as JSON with every non-ASCII character escaped, so lone surrogates reach the
    server as `\\udXXX`, the way a hostile client sends them."""
    raw = json.dumps(body, ensure_ascii=True).encode()
    all_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return httpx.post(f"{url}{path}", content=raw, headers={**all_headers, **headers}, timeout=60)


def expect(response: httpx.Response, ok: bool) -> None:
    """200 when the input is valid, else 422; either way never a 5xx, always the error shape."""
    assert response.status_code == (200 if ok else 422), response.text
    if not ok:
        assert set(response.json()["error"]) == {"type", "message"}


def is_text(value: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)


def in_range(value: float | int | str) -> bool:
    if isinstance(value, str):  # made by RFC3339
        parsed = datetime.fromisoformat(value)
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return MIN_TS <= parsed.timestamp() <= MAX_TS
    return MIN_TS <= value <= MAX_TS


def test_any_time_is_stored_or_refused_and_recall_keeps_working(service: tuple[str, str]) -> None:
    url, token = service

    @property_settings
    @given(when=TIMES)
    def check(when: float | int | str) -> None:
        body = {"session": "times", "messages": [{"role": "user", "content": "at a time",
                                                  "timestamp": when}]}  # fmt: skip
        expect(post_raw(url, token, "/v1/capture", body), in_range(when))
        expect(post_raw(url, token, "/v1/recall", {"query": "time"}), True)

    check()


def test_a_time_that_is_not_rfc_3339_is_refused_naming_the_field(
    service: tuple[str, str],
) -> None:
    url, token = service

    @property_settings
    @given(when=NOT_RFC3339)
    def check(when: str) -> None:
        body = {"session": "times", "messages": [{"role": "user", "content": "at a time",
                                                  "timestamp": when}]}  # fmt: skip
        response = post_raw(url, token, "/v1/capture", body)
        expect(response, False)
        assert "message 0: timestamp" in response.json()["error"]["message"]

    check()


NUMBERS = st.one_of(
    st.floats(),  # NaN and the infinities included
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=-(10**4000), max_value=10**4000),
)


def is_json_number(value: float | int) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return abs(value) <= 2**63 - 1


def test_a_number_json_does_not_have_is_refused_wherever_it_is(service: tuple[str, str]) -> None:
    url, token = service

    @property_settings
    @given(number=NUMBERS, key=st.sampled_from(["score", "n"]))
    def check(number: float | int, key: str) -> None:
        raw = json.dumps({"session": "numbers", "messages": [
            {"role": "user", "content": "a number", "metadata": {"deep": [{key: number}]}}]})
        response = httpx.post(f"{url}/v1/capture", content=raw, timeout=60, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        expect(response, is_json_number(number))
        if not is_json_number(number):  # the message names where it is
            assert f"messages[0].metadata.deep[0].{key}" in response.json()["error"]["message"]
        pair = {"pairs": [{"call_id": "c", "tool": "t", "result": "r", "params": {key: number}}]}
        raw = json.dumps(pair)
        tools = httpx.post(f"{url}/v1/offload/sessions/numbers/tool-results", content=raw,
                           headers={"Authorization": f"Bearer {token}",
                                    "Content-Type": "application/json"}, timeout=60)
        expect(tools, is_json_number(number))

    check()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "9" * 5000])
def test_literals_json_does_not_have_are_refused_not_stored_as_null(
    service: tuple[str, str], literal: str
) -> None:
    url, token = service
    raw = ('{"session": "literals", "messages": [{"role": "user", "content": "x",'
           f' "metadata": {{"v": {literal}}}}}]}}')  # fmt: skip
    response = httpx.post(f"{url}/v1/capture", content=raw, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    expect(response, False)
    assert "string" in response.json()["error"]["message"]  # says what to send instead


def test_a_correction_that_names_nothing_is_refused(service: tuple[str, str]) -> None:
    url, token = service
    auth = {"Authorization": f"Bearer {token}"}
    made = httpx.post(f"{url}/v1/memories", json={"content": "Keeps bees"}, headers=auth)
    response = httpx.patch(f"{url}/v1/memories/{made.json()['id']}", json={}, headers=auth)
    expect(response, False)
    assert "content, type or priority" in response.json()["error"]["message"]


def test_mcp_ids_are_strings_or_integers(service: tuple[str, str]) -> None:
    url, token = service
    ids = st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text(max_size=8),
                    st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))  # fmt: skip

    @property_settings
    @given(request_id=ids)
    def check(request_id: Any) -> None:
        call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
        response = post_raw(url, token, "/mcp", call, Accept="application/json, text/event-stream")
        valid = isinstance(request_id, str) or (
            isinstance(request_id, int) and not isinstance(request_id, bool)
            and abs(request_id) < 2**63)  # fmt: skip
        if valid:
            assert response.status_code == 200 and response.json()["id"] == request_id
        else:
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == -32600
            assert "id must be a string or an integer" in response.json()["error"]["message"]

    check()


def test_any_unicode_is_stored_verbatim_or_refused(service: tuple[str, str]) -> None:
    url, token = service

    @property_settings
    @given(text=UNICODE, key=UNICODE)
    def check(text: str, key: str) -> None:
        ok = is_text(text) and is_text(key) and bool(text.strip())
        body = {"session": "unicode", "messages": [{"role": "user", "content": text,
                                                    "metadata": {key: text}}]}  # fmt: skip
        response = post_raw(url, token, "/v1/capture", body)
        expect(response, ok)
        if ok and response.json()["stored"]:
            again = {"session": "unicode", "messages": [
                {"role": "user", "content": unicodedata.normalize("NFD", text),
                 "metadata": {key: text}}]}  # fmt: skip
            assert post_raw(url, token, "/v1/capture", again).json()["stored"] == []
        recalled = post_raw(url, token, "/v1/recall", {"query": text})
        expect(recalled, is_text(text) and bool(text.strip()))
        pair = {"call_id": "c1", "tool": "t", "result": text}
        tools = post_raw(url, token, "/v1/offload/sessions/unicode/tool-results", {"pairs": [pair]})
        expect(tools, is_text(text))

    check()


def test_nesting_is_bounded(service: tuple[str, str]) -> None:
    url, token = service

    @property_settings
    @given(depth=st.integers(min_value=1, max_value=80), leaf=st.sampled_from(["x", 1, None]))
    def check(depth: int, leaf: Any) -> None:
        value: Any = leaf
        for level in range(depth):
            value = [value] if level % 2 else {"k": value}
        message = {"role": "user", "content": "nested", "extra": value}
        body = {"messages": [message], "budget_tokens": 1000}
        # the body, the messages list and the message are three levels above `value`
        expect(post_raw(url, token, "/v1/offload/sessions/deep/compact", body),
               depth + 3 <= MAX_NESTING)  # fmt: skip

    check()


def call_tool(url: str, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}  # fmt: skip
    response = post_raw(url, token, "/mcp", call, Accept="application/json, text/event-stream")
    assert response.status_code < 500, response.text
    return dict(response.json())


def test_the_mcp_tools_check_what_rest_checks(service: tuple[str, str]) -> None:
    url, token = service
    tools = st.sampled_from(["search_memories", "search_conversations", "recall"])

    @property_settings
    @given(name=tools, query=UNICODE, k=st.integers(min_value=-(10**12), max_value=10**12),
           extra=st.booleans())  # fmt: skip
    def check(name: str, query: str, k: int, extra: bool) -> None:
        arguments: dict[str, Any] = {"query": query}
        if name != "recall":
            arguments["k"] = k
        if extra:
            arguments["tenant"] = "someone-else"
        answer = call_tool(url, token, name, arguments)
        if not is_text(query):
            assert "error" in answer  # not JSON text: refused before any tool runs
            return
        valid = bool(query.strip()) and (name == "recall" or 1 <= k <= 100) and not extra
        result = answer["result"]
        assert result["isError"] is not valid, (arguments, result)
        if not valid:  # the reason reaches the client, not only the server's log
            assert result["content"][0]["text"] != f"Error executing tool {name}"

    check()
