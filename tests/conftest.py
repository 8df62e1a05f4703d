"""Suite-wide fixtures and rules: tests that need a service may not be skipped in CI."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from stratamem.testing import scripted_llm_fixture
from tests.stores import open_store, pg_server, store_kind

__all__ = ["open_store", "pg_server", "store_kind"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SERVICE_MARKERS = ("redis", "postgres", "llm_replies", "browser")

# A running scripted OpenAI-compatible server (stratamem.testing.ScriptedLLM), one per test.
scripted_llm = scripted_llm_fixture()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-model tier runs only through `make test-llm` (STRATAMEM_REALMODEL=1): elsewhere
    its tests are deselected, neither run nor skipped."""
    if os.environ.get("STRATAMEM_REALMODEL") == "1":
        return
    tier = [item for item in items if item.get_closest_marker("realmodel")]
    if tier:
        config.hook.pytest_deselected(items=tier)
        items[:] = [item for item in items if not item.get_closest_marker("realmodel")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    required = os.environ.get("STRATAMEM_REQUIRE_SERVICES") == "1"
    needs = [m for m in SERVICE_MARKERS if item.get_closest_marker(m)]
    if required and needs and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped a test that needs {', '.join(needs)} in CI: {report.longrepr}"
    return report
