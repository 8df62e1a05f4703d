#!/usr/bin/env bash
# The main job on the embedded defaults: capture the shipped sample conversation into a fresh
# store, embed it with the local model, and search and recall from it through the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
data_dir="${STRATAMEM_DATA_DIR:-./stratamem-data/demo}"
sample="src/stratamem/samples/conversation.jsonl"
stratamem=".venv/bin/stratamem --data-dir $data_dir"

echo "== import $sample (tenant maya)"
$stratamem import "$sample" --tenant maya
echo
echo "== stats"
$stratamem stats --tenant maya
for query in "Who lent Maya a van?" "What units should answers use?" "When is the town hall appointment?"; do
    echo
    echo "== search: $query"
    $stratamem search --tenant maya --k 3 "$query"
done
echo
echo "== recall before the next model call: 'help me plan my training week'"
$stratamem recall --tenant maya "help me plan my training week"
