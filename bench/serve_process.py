"""A fresh `stratamem serve` for the benches that drive one over HTTP (`load.py`, `soak.py`)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0
_ADDRESS = re.compile(r"listening on (http://\S+)")


@contextmanager
def serve(
    embedder: str, env: dict[str, str], prefix: str, args: Sequence[str] = ()
) -> Iterator[tuple[str, int]]:
    """`stratamem serve` on 127.0.0.1, any free port, in a new temporary data directory, with
    this process's environment less its `STRATAMEM_*` variables, plus `env`, and `args` after
    `serve`'s own (`--processes 2`); its base URL and pid. Stopped with SIGTERM on exit (killed
    if it has not stopped within a minute)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        full = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
        full.update(HF_HUB_OFFLINE="1", **env)
        log = Path(tmp) / "serve.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stratamem.cli.main", "--data-dir", f"{tmp}/data",
                 "--embedder", embedder, "serve", "--host", HOST, "--port", "0", *args],
                env=full, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                yield _address(proc, log), proc.pid
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _address(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        found = _ADDRESS.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"serve exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)  # waiting for a process to start, bounded by the deadline
    raise SystemExit("serve did not start in time")


def cpu_seconds(pid: int) -> float:
    """User and system CPU so far of a live process and of its live descendants (Linux; a
    descendant that already exited is not counted)."""
    total = 0.0
    for found in _tree(pid):
        try:
            fields = Path(f"/proc/{found}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo.extend(int(child) for child in task.read_text().split())
            except OSError:
                continue
    return found
