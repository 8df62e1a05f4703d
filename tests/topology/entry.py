"""`stratamem` as the topology's processes run it: SIGUSR1 prints the stack of every asyncio task
to stderr (the process's log), so a process that does not stop shows what it waits for (the
threads' stacks, which faulthandler prints on SIGABRT, show only an idle event loop)."""

from __future__ import annotations

import asyncio
import signal
import sys
from types import FrameType

from stratamem.cli.main import main

DUMPED = "--- asyncio tasks dumped"


def _dump(signum: int, frame: FrameType | None) -> None:
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no event loop running (yet)
        tasks = set()
    for task in tasks:
        print(f"--- task {task.get_name()}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    print(DUMPED, file=sys.stderr, flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _dump)
    main()
