"""Settings of the memory core, from arguments, environment (`STRATAMEM_*`) or defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from stratamem.errors import ConfigError
from stratamem.retrieval.config import RetrievalConfig

DEFAULT_DATA_DIR = Path("stratamem-data")
ENV_PREFIX = "STRATAMEM_"
_SEARCH = RetrievalConfig()


class Settings(BaseSettings):
    """Core settings. Each field can be set as `STRATAMEM_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    data_dir: Path = Field(DEFAULT_DATA_DIR, description="Directory of the embedded store.")
    store_url: str | None = Field(
        None,
        description="The system of record: unset for the SQLite file under `data_dir`,"
        " `sqlite:PATH` for another file, `postgresql://USER:PASSWORD@HOST/DB` for PostgreSQL"
        " (the `postgres` extra). Every process of a deployment uses the same.",
    )
    embedder: str = Field(
        "local",
        description="`local` (all-MiniLM-L6-v2 on ONNX Runtime, 8-bit block weights), `local:fp32`"
        " (its float32 graph), `local:int8` (its int8 graph),"
        " `onnx:DIR` (an ONNX sentence encoder in a directory), `st` (sentence-transformers and"
        " torch), `hash[:DIM]` (no model), `openai:MODEL` (an OpenAI-compatible /v1/embeddings"
        " endpoint) or `none` (BM25 only).",
    )
    embed_base_url: str | None = Field(None, description="Base URL for `openai:` embedders.")
    embed_api_key: str | None = Field(None, description="API key for `openai:` embedders.")
    embed_dim: int | None = Field(
        None, ge=8, description="Vector width of `openai:` embedders (else found on first call)."
    )
    embed_batch_size: int = Field(64, ge=1, le=4096, description="Texts per embedding batch.")
    onnx_spinning: bool = Field(
        False,
        description="ONNX Runtime embedders (`local`, `onnx:`): threads spin between the"
        " operators of a run instead of sleeping (faster alone, slower on a busy machine).",
    )
    max_turn_chars: int = Field(
        100_000, ge=1, description="Longest message text accepted by capture."
    )
    rrf_k: int = Field(_SEARCH.rrf_k, ge=1, description="Reciprocal rank fusion constant.")
    candidates_per_retriever: int = Field(
        _SEARCH.candidates,
        ge=1,
        le=1000,
        description="Candidates each retriever contributes before fusion.",
    )
    recall_k: int = Field(8, ge=1, le=100, description="Memories in a recall block.")
    recall_recent_turns: int = Field(
        20, ge=0, le=10_000, description="With a `session`, recall leaves out that session's"
        " last turns, this many, which the agent has in its context already (0: none).",
    )
    recall_budget_chars: int = Field(
        2000, ge=0, description="Character budget of the per-turn recall block."
    )
    stable_budget_chars: int = Field(
        2000, ge=0, description="Character budget of the stable (profile, scenes) block."
    )
    pg_vector_index_min: int = Field(
        20_000,
        ge=1,
        description="PostgreSQL: vectors a tenant has in a layer (turns or memories) from which"
        " it gets an HNSW index of its own; below it its vector searches are exact.",
    )
    sqlite_synchronous: Literal["normal", "full"] = Field(
        "normal",
        description="SQLite `synchronous` level of the store: `normal` loses nothing when the"
        " process dies, but may lose the last commits on power loss or an OS crash; `full` syncs"
        " every commit to disk (slower writes).",
    )
    sqlite_readers: int = Field(
        3,
        ge=0,
        le=16,
        description="SQLite: read-only connections a process keeps beside its writer, so reads"
        " (recalls, searches) need not wait for writes; 0 reads on the writer.",
    )
    background_embedding: bool = Field(
        True, description="Embed captured records in background batches while the memory is open."
    )

    @property
    def store_path(self) -> Path:
        return self.data_dir / "stratamem.db"


def load_core(**overrides: Any) -> Settings:
    """`Settings` from `overrides` and the environment; `ConfigError` naming what to fix."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(explain_invalid(exc, ENV_PREFIX)) from exc


def explain_invalid(exc: ValidationError, prefix: str, config_file: Path | None = None) -> str:
    """One line per invalid setting: its variable (and its name in `config_file`), what is wrong."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        where = f"{prefix}{field.upper()}"
        if config_file is not None:
            where += f" (or `{field}` in {config_file})"
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "invalid settings:\n  " + "\n  ".join(lines)
