#!/usr/bin/env bash
# Create the virtual environment with everything stratamem and its tests need.
# torch 2.13.0 (CPU) is installed first and pinned, so nothing pulls another (CUDA) build.
set -euo pipefail
venv="${1:-.venv}"
python="$(command -v python3.11 || command -v python3)"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "torch==2.13.0"
echo "torch==2.13.0" > "$venv/torch-constraint.txt"
"$venv/bin/python" -m pip install --quiet -c "$venv/torch-constraint.txt" \
    -e ".[local,redis,server,eval,bench,mem0,integrations,dev]"
