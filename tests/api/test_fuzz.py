"""The OpenAPI document fuzzed with schemathesis over a real socket: no 5xx, ever; answers match
their documented status codes and schemas; invalid data is rejected.

(Hypothesis drives each operation directly: schemathesis' pytest plugin does not run under the
pytest this project uses.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from stratamem.api import create_app
from tests.api.conftest import ADMIN_KEY, open_services
from tests.api.live import live

pytestmark = pytest.mark.slow
EXAMPLES_PER_OPERATION = 25
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    services = open_services(Path(tmp_path_factory.mktemp("fuzz")))
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
            # Invalid bodies must be refused. (Not asserted for query strings, where "0" is
            # both the number schemathesis meant as invalid and a valid session name.)
            checks = [*CHECKS, negative_data_rejection]
        _fuzz_operation(operation, url, key, mode, checks)


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
