"""Pipeline benchmark: `python bench/pipeline.py --backend redis --tasks 2000 --workers 8 --json`.

A thin wrapper over `stratamem bench pipeline` (logic in `stratamem.pipeline.bench`)."""

from __future__ import annotations

from stratamem.cli.pipeline_cmds import bench_pipeline

if __name__ == "__main__":
    bench_pipeline()
