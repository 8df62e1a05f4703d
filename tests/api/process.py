"""`stratamem serve` as a real process: start it, wait (bounded) until it answers, stop it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")
SRC = Path(__file__).resolve().parents[2] / "src"
READY_TIMEOUT_S = 60.0
_ADDRESS = re.compile(r"listening on (http://\S+)")


@dataclass
class ServeProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def stratamem(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a stratamem command in a process against this checkout's code."""
    return subprocess.run(
        [sys.executable, "-m", "stratamem.cli.main", "--data-dir", str(data_dir),
         "--embedder", "hash:64", *args],
        env=_env(), capture_output=True, text=True, check=True,
    )


def env_for_checkout(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without STRATAMEM_* settings, running this checkout's code."""
    return _env(extra)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    return {**env, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", **(extra or {})}


def _wait_for_address(proc: subprocess.Popen[bytes], log: Path, offset: int) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        match = _ADDRESS.search(log.read_bytes()[offset:].decode(errors="replace"))
        if match:
            return match.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)  # polling a process's readiness, bounded by the deadline
    raise AssertionError(f"serve did not announce its address: {log.read_text()}")


def wait_for(read: Callable[[], T], done: Callable[[T], bool]) -> T:
    """Poll `read` until `done` says so (a process's progress), bounded by a deadline."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            assert done(value), f"gave up waiting; last value: {value!r}"
            return value
        time.sleep(0.05)


def _wait_for_ready(url: str) -> None:
    """Until `/v1/ready` answers 200: the service is up and its embedding model loaded."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} did not become ready")


@contextmanager
def serving(
    data_dir: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[ServeProcess]:
    """A `stratamem serve` on a free port; stopped (or already killed) on exit."""
    command = [sys.executable, "-m", "stratamem.cli.main", "--data-dir", str(data_dir),
               "--embedder", "hash:64", "serve", "--port", "0", *args]  # fmt: skip
    with running(command, log, _env(env)) as server:
        yield server


@contextmanager
def running(
    command: list[str], log: Path, env: dict[str, str], cwd: Path | None = None
) -> Iterator[ServeProcess]:
    """Any command that ends up announcing `listening on URL`; stopped on exit."""
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as sink:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=sink, stderr=sink)
    try:
        url = _wait_for_address(proc, log, offset)
        _wait_for_ready(url)
        yield ServeProcess(proc, url, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
