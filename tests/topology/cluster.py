"""The scale-out topology as real processes on this machine: API processes (`stratamem serve
--workers 0`) and pipeline workers (`stratamem worker`), every one started with the same
environment, over one PostgreSQL database and one Redis key prefix."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.api.process import ServeProcess, env_for_checkout, running
from tests.scheduler.test_chaos import ENV as CHAOS_ENV
from tests.topology.entry import DUMPED

ADMIN_KEY = "topology-admin-key-0123456789abcdefghij"
REDIS_URL = "redis://127.0.0.1:6379/0"
CLI = [sys.executable, "-m", "stratamem.cli.main"]
ENTRY = [sys.executable, "-m", "tests.topology.entry"]
ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 30.0
DUMP_TIMEOUT_S = 5.0

# The chaos test's short locks (1 s TTL), leases, reclaim thresholds, batches and delays, so what
# a killed process held is taken over within about a second and the layers run often (under load
# a waited flush may lose a lock: its 409 is accepted); captured records are embedded in the
# background, as by default; a killed worker's claim on tool results lapses after 3 s.
TIMINGS = {
    **CHAOS_ENV,
    "STRATAMEM_BACKGROUND_EMBEDDING": "true",
    "STRATAMEM_OFFLOAD_L1_LEASE_S": "3",
}


def _stopped(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)
    return proc.poll() is not None


def _wait_for_text(log: Path, text: str, timeout_s: float) -> None:
    """Until a process wrote `text` into its log, at most `timeout_s`."""
    end = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace") and time.monotonic() < end:
        time.sleep(0.05)  # polling a process's output, bounded


def topology_env(store_url: str, redis_prefix: str, llm_url: str, data: Path) -> dict[str, str]:
    """The one configuration every process of the deployment gets (docs/deployment.md)."""
    return env_for_checkout({
        **TIMINGS,
        "STRATAMEM_STORE_URL": store_url,
        "STRATAMEM_DATA_DIR": str(data),
        "STRATAMEM_SERVER_ADMIN_KEY": ADMIN_KEY,
        "STRATAMEM_LLM_BASE_URL": llm_url,
        "STRATAMEM_PIPELINE_BACKEND": "redis",
        "STRATAMEM_PIPELINE_REDIS_URL": REDIS_URL,
        "STRATAMEM_PIPELINE_REDIS_PREFIX": redis_prefix,
        "PYTHONFAULTHANDLER": "1",
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
    })  # fmt: skip


class Topology:
    """API processes and workers; `kill_*` sends SIGKILL, `restart_*` starts a new one in the
    same slot. Every process still running is stopped on `close`."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.apis: list[ServeProcess] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self._stack = ExitStack()
        self._started = 0
        self._names: dict[int, str] = {}
        self._logs: dict[int, Path] = {}

    def start(self, apis: int, workers: int) -> None:
        """Workers first (they need no answer), then the API processes, each until ready."""
        self.workers = [self._spawn_worker() for _ in range(workers)]
        self.apis = [self._start_api() for _ in range(apis)]

    def urls(self) -> list[str]:
        return [api.url for api in self.apis]

    def kill_api(self, slot: int) -> None:
        self.apis[slot].kill()

    def kill_worker(self, slot: int) -> None:
        self.workers[slot].send_signal(signal.SIGKILL)
        self.workers[slot].wait(timeout=30)

    def busy_workers(self, statuses: list[dict[str, Any]]) -> list[int]:
        """The slots of live workers whose last published status shows running tasks."""
        busy = {s["name"] for s in statuses if s["running"]}
        return [n for n, proc in enumerate(self.workers)
                if proc.poll() is None and self._names[proc.pid] in busy]  # fmt: skip

    def restart_api(self, slot: int) -> None:
        self.apis[slot] = self._start_api()

    def restart_worker(self, slot: int) -> None:
        self.workers[slot] = self._spawn_worker()

    def all_running(self) -> bool:
        procs = [api.proc for api in self.apis] + self.workers
        return all(proc.poll() is None for proc in procs)

    def log_tail(self, chars: int = 4000) -> str:
        texts = [f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
                 for p in sorted(self.logs.glob("*.log"))]  # fmt: skip
        return "\n".join(texts)

    def close(self) -> None:
        """SIGTERM to every process still running, then a bounded wait for each to stop
        gracefully; one that does not is made to print its asyncio tasks (SIGUSR1) and its
        threads (SIGABRT, with PYTHONFAULTHANDLER) into its log, and the test fails with it."""
        procs = {api.proc: api.log for api in self.apis}
        procs.update((proc, self._logs[proc.pid]) for proc in self.workers)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        hung = [proc for proc in procs if not _stopped(proc, STOP_TIMEOUT_S)]
        for proc in hung:
            proc.send_signal(signal.SIGUSR1)
            _wait_for_text(procs[proc], DUMPED, DUMP_TIMEOUT_S)
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=30)
        self._stack.close()
        logs = "\n".join(f"--- {procs[p].name}\n{procs[p].read_text(errors='replace')[-20_000:]}"
                         for p in hung)  # fmt: skip
        assert not hung, f"{len(hung)} process(es) ignored SIGTERM:\n{logs}"

    def _log(self, kind: str) -> Path:
        self._started += 1
        return self.logs / f"{self._started:02}-{kind}.log"

    def _start_api(self) -> ServeProcess:
        command = [*ENTRY, "serve", "--port", "0", "--workers", "0"]
        return self._stack.enter_context(running(command, self._log("api"), self.env))

    def _spawn_worker(self) -> subprocess.Popen[bytes]:
        path = self._log("worker")
        with path.open("wb") as log:
            proc = subprocess.Popen(
                [*ENTRY, "worker", "--name", path.stem], env=self.env, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self._names[proc.pid], self._logs[proc.pid] = path.stem, path
        return proc


@contextlib.contextmanager
def topology(env: dict[str, str], logs: Path, apis: int, workers: int) -> Iterator[Topology]:
    made = Topology(env, logs)
    try:
        made.start(apis, workers)
        yield made
    finally:
        made.close()
