"""`STRATAMEM_*` variables that nothing reads: a misspelt setting is reported, not ignored.

Every settings class reads its prefix and its fields (`STRATAMEM_PIPELINE_RETRY_LIMIT`), the
LLM settings also `STRATAMEM_LLM_<STAGE>_<FIELD>` for each stage, and a few variables are read by
name (`NAMED`). Anything else under `STRATAMEM_` is a mistake (a typo, a renamed setting, a
variable of another version): each command warns about it at start, with the nearest name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from pydantic_settings import BaseSettings

from stratamem.api.settings import ServerSettings
from stratamem.config import ENV_PREFIX, Settings
from stratamem.layers.settings import LayerSettings
from stratamem.llm.settings import ENV_PREFIX as LLM_PREFIX
from stratamem.llm.settings import STAGE_MAX_TOKENS, LLMSettings, StageSettings, split_stage
from stratamem.offload.settings import OffloadSettings
from stratamem.pipeline.settings import PipelineSettings
from stratamem.proxy.settings import ENV_PREFIX as PROXY_PREFIX
from stratamem.proxy.settings import ProxySettings

PREFIXED: tuple[tuple[type[BaseSettings], str], ...] = (
    (Settings, ENV_PREFIX),
    (ServerSettings, "STRATAMEM_SERVER_"),
    (PipelineSettings, "STRATAMEM_PIPELINE_"),
    (LayerSettings, "STRATAMEM_LAYERS_"),
    (OffloadSettings, "STRATAMEM_OFFLOAD_"),
    (LLMSettings, LLM_PREFIX),
    (ProxySettings, PROXY_PREFIX),
)
STAGES = (*STAGE_MAX_TOKENS, "eval_answer", "eval_judge")
"""Every stage an LLM call is made for (normalised, `stage_key`): the memory layers', context
offload's and the evaluation's (`stratamem.eval.qa`)."""
NAMED = frozenset({
    "STRATAMEM_CONFIG", "STRATAMEM_CACHE_DIR", "STRATAMEM_KEY", "STRATAMEM_URL",
    "STRATAMEM_PIPELINE_EXECUTORS", "STRATAMEM_PIPELINE_REDIS_URL",
})  # fmt: skip
"""Read by name: the config file, the model cache, the client's address and key, `worker`'s
executors and `bench pipeline`'s Redis."""
TOOLING = frozenset({
    "STRATAMEM_REQUIRE_SERVICES", "STRATAMEM_TEST_IMAGE", "STRATAMEM_LOCOMO",
    "STRATAMEM_LLM_REPLIES", "STRATAMEM_PYTHON", "STRATAMEM_LLAMA_VENV", "STRATAMEM_REALMODEL",
    "STRATAMEM_REALMODEL_PYTHON", "STRATAMEM_REALMODEL_GGUF", "STRATAMEM_REALMODEL_TURNS",
    "STRATAMEM_REALMODEL_MAX_TOKENS", "STRATAMEM_CHROMIUM", "STRATAMEM_UI_SHOTS",
})  # fmt: skip
"""Read by this project's own scripts and tests (CI sets some of them around the commands)."""


def known_names() -> frozenset[str]:
    """Every variable stratamem reads."""
    names = {f"{prefix}{field.upper()}" for cls, prefix in PREFIXED for field in cls.model_fields}
    names |= {f"{LLM_PREFIX}{stage.upper()}_{field.upper()}"
              for stage in STAGES for field in StageSettings.model_fields}  # fmt: skip
    return frozenset(names | NAMED | TOOLING)


def unknown(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The `STRATAMEM_*` names of `environ` nothing reads, each with a hint (the nearest known
    name, or the stages there are; empty when nothing is close), sorted."""
    known = known_names()
    return [(name, _hint(name.upper(), known)) for name in sorted(_ours(environ))
            if name.upper() not in known]  # fmt: skip


def warnings(environ: Mapping[str, str]) -> list[str]:
    """One line per unknown variable of `environ`, for a command's stderr."""
    return [f"warning: {name} is set, but stratamem reads no such variable{hint}"
            for name, hint in unknown(environ)]  # fmt: skip


def _ours(environ: Mapping[str, str]) -> Iterable[str]:
    """The names settings would read (they ignore case)."""
    return (name for name in environ
            if name.upper().startswith(ENV_PREFIX) and name.upper() != ENV_PREFIX)  # fmt: skip


def _hint(name: str, known: frozenset[str]) -> str:
    found = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
    if found:
        return f" (did you mean {found[0]}?)"
    if name.startswith(LLM_PREFIX) and split_stage(name.removeprefix(LLM_PREFIX)) is not None:
        return f" (the stages are {', '.join(s.upper() for s in STAGES)})"
    return ""

