#!/usr/bin/env bash
# `make run`: the service on the embedded defaults (SQLite store under ./stratamem-data, the local
# embedding model, http://127.0.0.1:8420). On first use it creates the tenant `demo` and writes
# an API key for it to ./stratamem-data/demo.key (readable by you only).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export STRATAMEM_DATA_DIR="${STRATAMEM_DATA_DIR:-./stratamem-data}"
python="${STRATAMEM_PYTHON:-.venv/bin/python}"
stratamem() { "$python" -m stratamem.cli.main "$@"; }
key_file="$STRATAMEM_DATA_DIR/demo.key"

if [ ! -s "$key_file" ]; then
    (umask 077 && mkdir -p "$STRATAMEM_DATA_DIR")  # 0700, as the store makes its own directory
    stratamem tenants list --json | grep -q '"name": "demo"' || stratamem tenants create demo >/dev/null
    (umask 077 && stratamem keys create demo --label "make run" > "$key_file")
    echo "created tenant demo; its API key is in $key_file"
fi
echo "try:  KEY=\$(cat $key_file)"
echo "      curl -s -H \"Authorization: Bearer \$KEY\" -H 'Content-Type: application/json' \\"
echo "           -d '{\"query\": \"what is my dog called?\"}' http://127.0.0.1:8420/v1/recall"
exec "$python" -m stratamem.cli.main serve "$@"
