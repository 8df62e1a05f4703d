"""Settings of the memory layers, from `STRATAMEM_LAYERS_*` environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class LayerSettings(BaseSettings):
    """When the layers run and how large their inputs and outputs may be."""

    model_config = SettingsConfigDict(env_prefix="STRATAMEM_LAYERS_", extra="ignore")

    # -- L1 scheduling -----------------------------------------------------------------------
    l1_every_turns: int = Field(8, ge=1, le=1000, description="L1 after this many new turns.")
    idle_timeout_s: float = Field(
        300.0, ge=0, description="L1 for a session quiet this long with unprocessed turns."
    )
    # -- L1 inputs ---------------------------------------------------------------------------
    max_batch_turns: int = Field(40, ge=1, le=500, description="Turns per L1 extraction.")
    context_turns: int = Field(4, ge=0, le=50, description="Earlier turns shown as background.")
    max_turn_chars_shown: int = Field(2000, ge=100, description="Longest turn text in a prompt.")
    max_memories_per_batch: int = Field(
        30, ge=1, le=200, description="Most memories one L1 batch may write."
    )
    neighbours: int = Field(
        4, ge=0, le=20, description="Existing memories shown per new one for reconciliation."
    )
    reconcile_min_similarity: float = Field(
        0.55,
        ge=-1,
        le=1,
        description="Cosine similarity an existing memory needs to be a new one's neighbour:"
        " a new memory without one is stored without asking the model (no embedder: every"
        " full-text neighbour counts). With the default embedder a fact and its update or"
        " contradiction score 0.6-0.85, unrelated facts of one user 0.44 (median); a `hash`"
        " embedder only sees shared words: set -1 to ask about every neighbour.",
    )
    l1_max_attempts: int = Field(
        12,
        ge=1,
        le=200,
        description="Extraction attempts per L1 run (at least the splits that bring a failing"
        " turn down to itself): a rejected batch is split in halves until the failing turn is"
        " alone, then quarantined; turns left over wait for the next run.",
    )
    quarantine_retry_s: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [3600.0, 21600.0, 86400.0],
        max_length=20,
        description="Waits before the automatic retries of a quarantined turn, comma-separated"
        " (one retry each; empty: none); after the last it waits for an operator.",
    )
    min_memory_words: int = Field(
        2,
        ge=1,
        le=20,
        description="Least words in a memory, a scene body or the profile (minimum-content rule).",
    )
    min_support: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Least share of a memory's content words its cited turns must say (support"
        " checks; measured on LoCoMo, bench/grounding_locomo.py).",
    )
    # -- L2 ----------------------------------------------------------------------------------
    l2_delay_s: float = Field(60.0, ge=0, description="L2 no sooner than this after an L1.")
    l2_min_interval_s: float = Field(300.0, ge=0, description="Least time between two L2 runs.")
    l2_max_memories: int = Field(80, ge=1, le=1000, description="Changed memories per L2 run.")
    l2_min_novel: int = Field(
        8,
        ge=1,
        description="A session's L2 runs once this many novel memories (no near neighbour when"
        " written, or an update or merge) came since the last L2 ...",
    )
    l2_min_changed: int = Field(
        24, ge=1, description="... or this many memories of any kind (a flush's L2 always runs)."
    )
    max_scenes: int = Field(12, ge=1, le=100, description="Scenes per tenant.")
    max_scene_chars: int = Field(1500, ge=100, description="Longest scene body.")
    heat_decay: float = Field(0.8, ge=0, le=1, description="Scene heat kept per L2 run.")
    offline_after_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description="An L2 or L3 reply still unusable after its repair round on this attempt of"
        " its task falls back to the offline (extractive) scenes or profile, recorded as a"
        " fallback (a flush's stages fall back at once: nothing retries them).",
    )
    # -- L3 ----------------------------------------------------------------------------------
    l3_every_memories: int = Field(30, ge=1, description="L3 after this many new memories.")
    l3_min_memories: int = Field(
        16,
        ge=1,
        description="L3 writes the profile when this many memories came since the last L3 (or"
        " there is no profile yet), else once the scenes are quiet.",
    )
    catch_up_quiet_s: float = Field(
        300.0,
        ge=0,
        description="Changes too few for L2 or L3 to run on (`l2_min_novel`, `l3_min_memories`)"
        " are consolidated once the tenant wrote none and said nothing for this long (L2: no"
        " memory and no turn; L3: no scene).",
    )
    max_profile_chars: int = Field(1200, ge=100, description="Longest profile document.")

    @field_validator("quarantine_retry_s", mode="before")
    @classmethod
    def _split_waits(cls, value: object) -> object:
        if isinstance(value, str):
            return [float(part) for part in value.split(",") if part.strip()]
        return value

    @field_validator("quarantine_retry_s")
    @classmethod
    def _positive_waits(cls, value: list[float]) -> list[float]:
        if any(wait <= 0 for wait in value):
            raise ValueError("every wait before a retry must be more than 0 seconds")
        return value

    def quarantine_retry_at(self, now: float, retries_done: int) -> float | None:
        """When a quarantined turn that had `retries_done` automatic retries is retried next
        (None: no more; it waits for an operator)."""
        waits = self.quarantine_retry_s
        return now + waits[retries_done] if retries_done < len(waits) else None
