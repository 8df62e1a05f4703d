"""The real-reply corpus loads, and the scripted server answers each recorded reply verbatim."""

from __future__ import annotations

import httpx
import pytest

from stratamem.testing import ScriptedLLM
from tests.replay_corpus import exchanges

pytestmark = pytest.mark.llm_replies


def test_the_corpus_holds_every_run_its_readme_lists() -> None:
    runs = {e.run for e in exchanges()}
    assert {"curl", "runA", "runC", "runD", "runE", "evalE", "offload1", "offload2"} <= runs
    assert all(e.request.get("messages") for e in exchanges() if e.run != "curl")


def test_a_recorded_reply_is_served_byte_for_byte() -> None:
    recorded = [e for e in exchanges("runD") if e.status == 200]
    with ScriptedLLM() as llm:
        llm.push(*(e.reply() for e in recorded))
        for exchange in recorded:
            answer = httpx.post(f"{llm.base_url}/chat/completions", json=exchange.request)
            assert answer.status_code == exchange.status
            assert answer.text == exchange.response
