"""Files that hold memories are private to their owner.

A data directory stratamem creates is 0700, and each database file it creates 0600 (SQLite gives
the `-wal` and `-shm` files the mode of their database), because they hold every memory in
clear text. Directories and files that exist already keep their mode.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def create_private(path: Path) -> None:
    """Create `path`'s directory (0700) and `path` itself (0600, empty), where they do not exist;
    raises `OSError` when they cannot be created."""
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
