"""Settings of context offload, from `STRATAMEM_OFFLOAD_*` environment variables."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from stratamem.errors import ConfigError


class OffloadSettings(BaseSettings):
    """Thresholds, batch sizes and bounds of the offload stages and of compaction."""

    model_config = SettingsConfigDict(env_prefix="STRATAMEM_OFFLOAD_", extra="ignore")

    l1_batch: int = Field(
        8, ge=1, le=500, description="Pending pairs that enqueue offload-l1 at once."
    )
    l1_delay_s: float = Field(30.0, ge=0, description="Below the batch, offload-l1 runs this late.")
    l1_claim_max: int = Field(32, ge=1, le=500, description="Pairs one offload-l1 run claims.")
    l1_lease_s: float = Field(300.0, gt=0, description="A claim not finished within this expires.")
    l1_prompt_result_chars: int = Field(
        3000, ge=200, description="Characters of each result shown to the summariser."
    )
    l1_prompt_max_chars: int = Field(
        24_000, ge=1000, description="Characters of tool calls in one summary prompt."
    )
    l1_max_attempts: int = Field(
        12,
        ge=1,
        le=200,
        description="Summary attempts per offload-l1 run: an unusable reply splits its calls in"
        " halves, down to one call, which gets the offline summary.",
    )
    summary_max_chars: int = Field(400, ge=40, description="Longest summary kept.")
    fallback_score: int = Field(
        1, ge=0, le=10, description="Score of an entry the LLM left out (offline summary)."
    )
    judgment_messages: int = Field(6, ge=1, le=50, description="Recent messages shown to L1.5.")
    cas_attempts: int = Field(3, ge=1, le=10, description="L1.5 re-judgments on a CAS conflict.")
    diagram_batch: int = Field(
        5, ge=1, description="Unmapped entries of a session that arm offload-l2 at once."
    )
    diagram_delay_s: float = Field(120.0, ge=0, description="Below the batch, offload-l2 waits.")
    orphan_max_age_s: float = Field(
        900.0, gt=0, description="Entries unmapped this long get an orphan node."
    )
    diagram_max_lines: int = Field(120, ge=5, description="Longest Mermaid diagram, in lines.")
    diagram_max_chars: int = Field(6000, ge=200, description="Longest Mermaid diagram, in chars.")
    mild_ratio: float = Field(0.50, gt=0, le=1, description="Fill ratio of mild compaction.")
    aggressive_ratio: float = Field(0.85, gt=0, le=1, description="Fill of aggressive compaction.")
    emergency_ratio: float = Field(0.95, gt=0, le=1, description="Fill of emergency compaction.")
    mild_min_score: int = Field(
        7, ge=0, le=10, description="Mild compaction replaces results scored at least this."
    )
    aggressive_min_score: int = Field(
        3, ge=0, le=10, description="Aggressive compaction replaces results scored at least this."
    )
    diagram_budget_share: float = Field(
        0.10, ge=0, le=0.5, description="Share of the budget injected diagrams may take."
    )
    readback_max_tokens: int = Field(2000, ge=50, description="Default token cap of a read-back.")

    @model_validator(mode="after")
    def _ordered(self) -> OffloadSettings:
        if not self.mild_ratio < self.aggressive_ratio < self.emergency_ratio:
            raise ConfigError(
                "compaction ratios must grow: mild_ratio < aggressive_ratio < emergency_ratio"
            )
        return self
