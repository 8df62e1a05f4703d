"""The corpus of real model replies (`../shared/data/llm-replies/`), for replay in tests.

Every request stratamem's LLM stages sent to a real small model (SmolLM2-135M-Instruct on
llama-cpp-python's server) and what came back, one JSON object per line (see the corpus README).
The corpus holds LoCoMo text (CC BY-NC): it is read from its place on the machine, never copied
into the repository. `STRATAMEM_LLM_REPLIES` names another directory.

Tests that use it are marked `llm_replies`; in CI (`STRATAMEM_REQUIRE_SERVICES=1`) such a test may
not be skipped (tests/conftest.py), so a missing corpus fails the run instead of hiding the tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stratamem.testing import Reply

DEFAULT_DIR = Path("/work/shared/data/llm-replies")


def corpus_dir() -> Path:
    return Path(os.environ.get("STRATAMEM_LLM_REPLIES") or DEFAULT_DIR)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One recorded request and what the real endpoint answered."""

    run: str
    line: int
    stage: str | None
    status: int
    request: dict[str, Any]
    response: Any
    content: str | None
    finish_reason: str | None

    def reply(self) -> Reply:
        """The recorded answer, byte for byte where it was JSON, as a scripted reply."""
        return Reply.raw(self.response if self.response is not None else "", self.status)

    @property
    def ident(self) -> str:
        return f"{self.run}:{self.line}"


def exchanges(run: str | None = None) -> list[Exchange]:
    """Every recorded exchange (of one run file, e.g. `runD`); skips the test when the corpus is
    not on this machine (a failure in CI, see the module doc)."""
    root = corpus_dir()
    if not root.is_dir():
        pytest.skip(f"the real-reply corpus is not at {root} (set STRATAMEM_LLM_REPLIES)")
    files = [root / f"{run}.jsonl"] if run else sorted(root.glob("*.jsonl"))
    return [item for path in files for item in _read(path)]


def _read(path: Path) -> Iterator[Exchange]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            yield Exchange(
                run=path.stem,
                line=number,
                stage=record.get("stage"),
                status=int(record.get("status") or 0),
                request=dict(record.get("request") or {}),
                response=record.get("response"),
                content=record.get("content"),
                finish_reason=record.get("finish_reason"),
            )
