"""`serve --processes N`: N API processes on one port, over the one embedded store.

One process runs the HTTP API at most one core's worth (its event loop, the framework and the
store's connection are its own), so on a machine with more cores `serve` can run several:

- the supervisor (the process started) reserves the port, applies the store's migrations once,
  and starts N API processes (`multiprocessing`'s spawn: nothing it holds is inherited), each
  with its own socket on the same port (`SO_REUSEPORT`: the kernel spreads new connections
  over them, so a burst of connections does not all go to the one that woke first);
- each opens the store and the pipeline itself (SQLite in WAL mode: readers of one process
  never wait for another's, writes are short transactions, and the pipeline's leases and
  competing consumers already hold across processes, as with `stratamem worker`);
- the first runs the pipeline consumers (`--workers`) and the embedding catch-up, woken every
  `EMBEDDING_POLL_S` for what the others captured; the others are API only. Every one runs the
  backlog scheduler, whose leases keep each kind active in one process at a time;
- each holds `max_connections / N` connections (the bound stays the service's), and its own
  per-tenant request limits and `/metrics` counters (`stratamem_api_process` names the
  process that answered a scrape);
- SIGTERM / SIGINT to the supervisor stops every API process as `serve` stops (each drains its
  requests and tasks under the shutdown bound), then the supervisor exits 0. An API process that
  ends unasked stops the others and the supervisor exits 1; one whose supervisor died stops.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType

from stratamem import logs
from stratamem.api.server import bind, layers_mode, run_process, where_tasks_run
from stratamem.api.settings import AllSettings
from stratamem.core import AsyncMemory
from stratamem.errors import ConfigError
from stratamem.store.opening import open_store

log = logging.getLogger(__name__)

#: How often the embedding process looks for records the other processes captured.
EMBEDDING_POLL_S = 1.0
#: Longest wait for the API processes to stop after the shutdown bound, before they are killed.
STOP_MARGIN_S = 15.0


def process_settings(settings: AllSettings, index: int, count: int) -> AllSettings:
    """The settings of API process `index` of `count`: the first keeps the pipeline consumers
    and the embedding catch-up; each holds its share of the connections."""
    core, server, pipeline = settings
    first = index == 0
    own_server = {
        "workers": server.workers if first else 0,
        "processes": 1,
        "max_connections": math.ceil(server.max_connections / count),
    }
    return AllSettings(
        core.model_copy(update={"background_embedding": core.background_embedding and first}),
        server.model_copy(update=own_server),
        pipeline,
    )


def supervise(settings: AllSettings, announce: Callable[[str], None]) -> None:
    """Run `settings.server.processes` API processes until SIGTERM / SIGINT (see the module)."""
    core, server, _ = settings
    count = server.processes
    logs.configure()
    open_store(core).close()  # the migrations, once, before N processes open the store
    holder = bind(server.host, server.port, reuse_port=True, listen=False)
    host, port = holder.getsockname()[:2]
    context = multiprocessing.get_context("spawn")
    started: list[tuple[BaseProcess, Connection]] = []
    stopping = _Stopping()
    try:
        for index in range(count):
            mine, theirs = context.Pipe(duplex=False)
            child = context.Process(
                target=_api_process, name=f"stratamem-api-{index}",
                args=(process_settings(settings, index, count), host, port, theirs),
            )  # fmt: skip
            child.start()
            theirs.close()
            started.append((child, mine))
        layers = _await_ready(started, stopping)
        if layers is not None:
            pids = ", ".join(str(child.pid) for child, _ in started)
            workers = where_tasks_run(server.workers, " in the first")
            announce(
                f"stratamem listening on http://{host}:{port} ({count} API processes, pids"
                f" {pids}; {workers}; data in {core.data_dir}; {layers})"
            )
        _watch(started, stopping)
    finally:
        stopping.restore()
        _stop_all(started, server.shutdown_timeout_s)
        holder.close()
    if stopping.failed:
        raise SystemExit(1)


class _Stopping:
    """SIGTERM / SIGINT to the supervisor: asked to stop (the API processes get SIGTERM)."""

    def __init__(self) -> None:
        self.asked = False
        self.failed = False
        self._previous = {
            sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)
        }

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _await_ready(started: list[tuple[BaseProcess, Connection]], stopping: _Stopping) -> str | None:
    """Every API process's first word: ready (with how its layers run), or the `ConfigError`
    it met, raised here; None when one ended without a word or a stop was asked meanwhile."""
    layers: str | None = None
    for child, conn in started:
        while not stopping.asked and not wait([conn, child.sentinel], timeout=0.5):
            continue
        if stopping.asked:
            return None
        if not conn.poll():
            log.error("API process %s exited with %s before it was ready", child.name,
                      child.exitcode)  # fmt: skip
            stopping.failed = True
            return None
        word, detail = conn.recv()
        if word == "error":
            raise ConfigError(detail)
        layers = layers or detail
    return layers


def _watch(started: list[tuple[BaseProcess, Connection]], stopping: _Stopping) -> None:
    """Until asked to stop or an API process ends unasked."""
    sentinels = {child.sentinel: child for child, _ in started}
    while not stopping.asked and not stopping.failed:
        for ended in wait(list(sentinels), timeout=0.5):
            child = sentinels[ended]  # type: ignore[index]
            log.error("API process %s (pid %s) exited with %s; stopping the others",
                      child.name, child.pid, child.exitcode)  # fmt: skip
            stopping.failed = True


def _stop_all(started: list[tuple[BaseProcess, Connection]], bound_s: float) -> None:
    """SIGTERM to every API process still running; each stops as `serve` does, within the
    shutdown bound plus its unwinding: one still running after `STOP_MARGIN_S` more is killed."""
    for child, _ in started:
        if child.is_alive() and child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    for child, conn in started:
        child.join(bound_s + STOP_MARGIN_S)
        if child.is_alive():
            log.error("API process %s did not stop in time: killed", child.name)
            child.kill()
            child.join()
        conn.close()


def _api_process(settings: AllSettings, host: str, port: int, parent: Connection) -> None:
    """One API process: its own socket on the shared port; stops at SIGTERM or when the
    supervisor is gone."""
    os.setpgrp()  # a terminal's Ctrl-C reaches the supervisor, which stops the processes in order
    gone = multiprocessing.parent_process()
    stop_on = gone.sentinel if gone is not None else None

    def ready(bound_host: str, bound_port: int, memory: AsyncMemory) -> None:
        parent.send(("ready", layers_mode(memory)))
        parent.close()

    poll_s = EMBEDDING_POLL_S if settings.core.background_embedding else None
    try:
        run_process(settings, lambda: bind(host, port, reuse_port=True), ready, stop_on, poll_s)
    except ConfigError as exc:
        if not parent.closed:
            parent.send(("error", str(exc)))
        raise SystemExit(2) from exc
