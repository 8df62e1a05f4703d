"""Addresses in errors and logs: URLs to scheme://host[:port] for operators, to "the endpoint"
for tenants, an endpoint's echo of its credentials cut out; the process log in plain lines,
expected failures in one WARNING line, the MCP SDK kept off the root logger."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from stratamem import logs
from stratamem.api.errors import public_message
from stratamem.api.mcp_server import build_mcp, fixed_tenant
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.errors import InvalidInput, StoreError
from stratamem.httpretry import redact_url, redact_urls, scrub_reply
from stratamem.llm import LLMClient, LLMSettings
from stratamem.llm.errors import LLMHTTPError, LLMUnavailable
from stratamem.testing import ScriptedLLM


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pass@llm.internal/v1", "http://llm.internal"),
        ("https://llm:8443/v1/chat/completions?key=sk-1#x", "https://llm:8443"),
        ("http://[::1]:8080/v1", "http://[::1]:8080"),
        ("redis://:secret@cache:6379/0", "redis://cache:6379"),
        ("http://host:notaport/v1", "http://(unreadable address)"),
    ],
)
def test_a_url_is_shown_as_scheme_host_and_port(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_every_url_in_a_text_is_redacted_for_operators_and_gone_for_tenants() -> None:
    text = "stage L1: request to http://u:pw@10.0.0.5:8000/v1/chat/completions failed (see http://a/b)."
    assert redact_urls(text) == "stage L1: request to http://10.0.0.5:8000 failed (see http://a)."
    assert redact_urls(text, for_tenant=True) == (
        "stage L1: request to the endpoint failed (see the endpoint)."
    )


def test_an_endpoint_reply_that_echoes_its_credentials_is_cut() -> None:
    reply = "bad key sk-abcdef for /v1?token=t0ken-value (user admin:pw-123456)"
    url = "http://admin:pw-123456@h/v1?token=t0ken-value"
    scrubbed = scrub_reply(reply, url, "sk-abcdef")
    for secret in ("sk-abcdef", "t0ken-value", "pw-123456"):
        assert secret not in scrubbed


def test_tenants_are_told_a_failure_without_its_address_and_their_own_input_as_it_was() -> None:
    down = LLMUnavailable("stage L2: request to http://llm.internal:9000 failed")
    assert public_message(down) == "stage L2: request to the endpoint failed"
    assert "http://x.example" in public_message(InvalidInput("unknown role 'http://x.example'"))


async def test_the_llm_client_never_names_a_credential_in_its_errors() -> None:
    with ScriptedLLM() as llm:  # nothing scripted: it answers 501
        base = llm.base_url.replace("http://", "http://me:pa55word-x@")
        settings = LLMSettings(base_url=base, model="m", api_key="sk-key-123456", max_attempts=1)
        async with LLMClient(settings) as client:
            with pytest.raises(LLMHTTPError) as failed:
                await client.complete_text("L1", [{"role": "user", "content": "hi"}])
        shown = redact_url(llm.base_url)
    message = str(failed.value)
    assert "pa55word-x" not in message and "me:" not in message
    assert shown in message


@pytest.fixture
def stderr() -> Iterator[Callable[[], str]]:
    """The process logging of `stratamem.logs`; what it wrote (to a buffer standing in for
    stderr)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:
        root.removeHandler(handler)
    logs.configure()
    [ours] = [h for h in root.handlers if isinstance(h, logs.StderrHandler)]
    ours.stream = written = io.StringIO()
    yield written.getvalue
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def raised(error: Exception, cause: Exception) -> Exception:
    error.__cause__ = cause  # as `raise error from cause` leaves it
    return error


def test_an_expected_failure_is_one_warning_line_with_its_causes(stderr: Callable[[], str]) -> None:
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    error = raised(LLMUnavailable("stage L1: request to http://u:pw@h:1/v1 failed"), refused)
    logging.getLogger("stratamem.test").error("POST /v1/x failed", exc_info=error)
    [line] = stderr().splitlines()
    assert " WARNING stratamem.test: POST /v1/x failed: LLMUnavailable: stage L1:" in line
    assert line.endswith("http://h:1 failed <- ConnectError: [Errno 111] Connection refused")


def test_an_unexpected_failure_keeps_its_traceback_and_no_url_keeps_its_password(
    stderr: Callable[[], str],
) -> None:
    try:
        raise StoreError("disk I/O error at postgresql://app:pg-pass@db/mem") from OSError(5)
    except StoreError as error:
        logging.getLogger("stratamem.test").error("capture failed", exc_info=error)
    text = stderr()
    assert " ERROR stratamem.test: capture failed" in text
    assert "Traceback (most recent call last)" in text
    assert "pg-pass" not in text and "postgresql://db" in text


def test_building_the_mcp_server_leaves_the_process_logging_alone(tmp_path: Path) -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    memory = AsyncMemory.open(Settings(data_dir=tmp_path, embedder="hash:64"), llm=None)
    try:
        build_mcp(memory, fixed_tenant("alice"))
    finally:
        memory.store.close()
    assert (list(root.handlers), root.level) == before
