"""Start-up costs a user sees, with the default embedder against sentence-transformers (`st`) and
no embedder (`none`, the floor), in one run:

- `stratamem search` on a small store (the shipped sample conversation): wall seconds from
  process start to exit, and the process's CPU seconds (median of `--repeat` runs);
- `./scripts/run-demo.sh` (import, stats, three searches, a recall) on a fresh data directory;
- `stratamem serve`: seconds from process start until `/v1/ready` answers 200, then the first
  REST recall (ms).

Needs the `st` extra for the `st` rows (`make setup-st`). Run it under `nice` on a shared
machine and read the ratios: they come from one run.

    python bench/startup.py [--specs none,st,local] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "stratamem" / "samples" / "conversation.jsonl"
STRATAMEM = [sys.executable, "-m", "stratamem.cli.main"]
READY_TIMEOUT_S = 600.0


def _env(spec: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    env.update(HF_HUB_OFFLINE="1", STRATAMEM_EMBEDDER=spec)
    if "STRATAMEM_CACHE_DIR" in os.environ:
        env["STRATAMEM_CACHE_DIR"] = os.environ["STRATAMEM_CACHE_DIR"]
    return env


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def small_store(root: Path) -> Path:
    """The shipped sample captured and embedded (the same model name for `local` and `st`)."""
    data = root / "store"
    command = [*STRATAMEM, "--data-dir", str(data), "import", str(SAMPLE), "--tenant", "maya"]
    subprocess.run(command, env=_env("local"), cwd=ROOT, check=True, capture_output=True)
    for argv in (["tenants", "create", "maya"], ["keys", "create", "maya"]):
        done = subprocess.run([*STRATAMEM, "--data-dir", str(data), *argv], env=_env("none"),
                              cwd=ROOT, check=True, capture_output=True, text=True)  # fmt: skip
    (root / "key").write_text(done.stdout.strip(), encoding="utf-8")
    return data


def search(spec: str, data: Path, repeat: int) -> dict[str, float]:
    command = [*STRATAMEM, "--data-dir", str(data), "search", "--tenant", "maya", "--k", "3",
               "Who lent Maya a van?"]  # fmt: skip
    runs = [timed(command, _env(spec)) for _ in range(repeat)]
    return {"wall_s": round(statistics.median(w for w, _ in runs), 2),
            "cpu_s": round(statistics.median(c for _, c in runs), 2)}  # fmt: skip


def demo(spec: str, root: Path) -> dict[str, float]:
    env = _env(spec) | {"STRATAMEM_DATA_DIR": str(root / f"demo-{spec}")}
    wall, cpu = timed(["./scripts/run-demo.sh"], env)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def serve(spec: str, data: Path, token: str) -> dict[str, float]:
    """Seconds from start to ready, then the first recall's milliseconds."""
    command = [*STRATAMEM, "--data-dir", str(data), "serve", "--port", "0", "--workers", "0"]
    log = data.parent / f"serve-{spec}.log"
    started = time.perf_counter()
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, env=_env(spec), cwd=ROOT, stdout=sink, stderr=sink)
    try:
        url = _address(proc, log)
        _wait_ready(url)
        ready_s = time.perf_counter() - started
        first = time.perf_counter()
        answer = httpx.post(f"{url}/v1/recall", json={"query": "who lent Maya a van?"},
                            headers={"Authorization": f"Bearer {token}"}, timeout=120)  # fmt: skip
        answer.raise_for_status()
        return {"ready_s": round(ready_s, 2),
                "first_recall_ms": round((time.perf_counter() - first) * 1000, 1)}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _address(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"listening on (http://\S+)", log.read_text(errors="replace"))
        if found:
            return found.group(1)
        time.sleep(0.01)
    raise RuntimeError(f"serve did not start: {log.read_text(errors='replace')[-2000:]}")


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{url} did not become ready")


def main(specs: list[str], repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="stratamem-startup-") as tmp:
        root = Path(tmp)
        data = small_store(root)
        token = (root / "key").read_text(encoding="utf-8")
        figures: dict[str, Any] = {}
        for spec in specs:
            figures[spec] = {"search": search(spec, data, repeat), "demo": demo(spec, root),
                             "serve": serve(spec, data, token)}  # fmt: skip
    return {"load_average": [round(x, 2) for x in os.getloadavg()], "cores": os.cpu_count(),
            "embedders": figures}  # fmt: skip


def report(result: dict[str, Any]) -> None:
    print(f"load average {result['load_average']} on {result['cores']} cores")
    for spec, f in result["embedders"].items():
        s, d, v = f["search"], f["demo"], f["serve"]
        print(f"{spec:6} search {s['wall_s']:6.2f} s (cpu {s['cpu_s']:.2f})"
              f" | run-demo.sh {d['wall_s']:6.2f} s (cpu {d['cpu_s']:.2f})"
              f" | serve ready {v['ready_s']:6.2f} s,"
              f" first recall {v['first_recall_ms']} ms")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", default="none,st,local")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    outcome = main(arguments.specs.split(","), arguments.repeat)
    print(json.dumps(outcome, indent=2)) if arguments.json else report(outcome)
