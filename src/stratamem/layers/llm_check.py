"""`stratamem llm check`: whether the configured endpoint can serve the LLM stages.

Three steps, each timed: the models route (is the model listed?), a short chat reply (latency;
for information: a reply cut off at its few tokens is no fault), and an L1 extraction of a
plain statement through the real prompt, schema, bounds (the stage's `max_tokens` and timeout)
and checks, support checks included (does a structured reply round-trip within the bounds,
which endpoint profile did it take, how many memories were kept and refused). The endpoint is
usable when the extraction round trip succeeds: that is what the stages need.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from stratamem.domain import Role, Turn
from stratamem.errors import LLMError
from stratamem.httpretry import redact_url, redact_urls
from stratamem.layers import l1_read
from stratamem.layers.settings import LayerSettings
from stratamem.llm.client import LLMClient
from stratamem.llm.errors import LLMReplyTruncated
from stratamem.stages.records import Origin

CHECK_TURN = "I'm Maria. I moved to Lisbon last year and I teach piano to children."
TEXT_MAX_TOKENS = 16


@dataclass
class CheckReport:
    base_url: str
    model: str
    stage: str
    structured: str
    profile: str = ""
    model_listed: bool | None = None
    text_latency_s: float | None = None
    extraction_latency_s: float | None = None
    memories: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    max_tokens: int | None = None
    timeout_s: float | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return self.extraction_latency_s is not None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "usable": self.usable}


async def check_endpoint(
    client: LLMClient, stage: str = "L1", timer: Callable[[], float] = time.perf_counter
) -> CheckReport:
    """Run the three steps against `stage`'s endpoint; never raises for an endpoint failure
    (each becomes a problem of the report)."""
    config = client.settings.for_stage(stage)
    shown = redact_url(config.base_url)
    report = CheckReport(shown, config.model, stage, client.settings.structured_profile,
                         max_tokens=config.max_tokens, timeout_s=config.timeout_s)  # fmt: skip
    report.model_listed = await _model_listed(client, config.base_url, config.model, report)
    started = timer()
    try:
        await client.complete_text(stage, [{"role": "user", "content": "Reply with: ok"}],
                                   max_tokens=TEXT_MAX_TOKENS)  # fmt: skip
        report.text_latency_s = timer() - started
    except LLMReplyTruncated:  # a chatty model: it answered, at more than a few tokens
        report.text_latency_s = timer() - started
        report.notes.append(f"chat reply: longer than {TEXT_MAX_TOKENS} tokens (no matter)")
    except LLMError as exc:
        report.notes.append(f"chat reply: {type(exc).__name__}: {exc}")
    started = timer()
    try:
        extracted = await l1_read.extract(_reader(client), [_turn()], [])
        report.extraction_latency_s = timer() - started
        report.memories = [m.content for m in extracted.memories]
        report.refused = [f"{d.item.get('content')!r}: {d.reason}" for d in extracted.refused]
        if not report.memories:
            report.notes.append("extraction: no memory kept from a plain statement of facts")
    except LLMError as exc:
        report.problems.append(f"extraction: {type(exc).__name__}: {exc}")
    report.profile = client.profile_for(config)
    return report


async def _model_listed(
    client: LLMClient, base_url: str, model: str, report: CheckReport
) -> bool | None:
    headers = {}
    key = client.settings.api_key
    if key is not None:
        headers["Authorization"] = f"Bearer {key.get_secret_value()}"
    try:
        async with httpx.AsyncClient(timeout=client.settings.timeout_s) as http:
            listed = await http.get(f"{base_url}/models", headers=headers)
        ids = [str(m.get("id")) for m in listed.json().get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        report.problems.append(
            f"models route (not needed by the stages): {redact_urls(str(exc))}"
        )
        return None
    return model in ids


def _reader(client: LLMClient) -> l1_read.ReadRun:
    origin = Origin("llm-check", "llm-check", "llm-check", time.time())
    return l1_read.ReadRun(client, origin, LayerSettings())


def _turn() -> Turn:
    return Turn("llm-check-1", "llm-check", "llm-check", Role.USER, CHECK_TURN, time.time(),
                speaker="Maria", seq=1)  # fmt: skip


def render(report: CheckReport) -> str:
    """The report as lines for a terminal."""
    lines = [
        f"endpoint   {report.base_url}  model {report.model}  (stage {report.stage})",
        f"listed     {_yes(report.model_listed)} in /models",
        f"structured {report.profile} (setting: {report.structured})",
        f"bounds     max_tokens {report.max_tokens}, timeout {report.timeout_s:g} s (stage"
        f" {report.stage})",
        f"chat       {_latency(report.text_latency_s)} (for information)",
        f"extraction {_latency(report.extraction_latency_s)}"
        + (f", {len(report.memories)} memories, {len(report.refused)} refused"
           if report.extraction_latency_s is not None else ""),
    ]  # fmt: skip
    lines += [f"  - {memory}" for memory in report.memories]
    lines += [f"  - refused {item}" for item in report.refused]
    lines += [f"note       {note}" for note in report.notes]
    lines += [f"problem    {problem}" for problem in report.problems]
    lines.append("usable" if report.usable else "NOT usable")
    return "\n".join(lines)


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _latency(value: float | None) -> str:
    return "failed" if value is None else f"ok in {value:.2f} s"
