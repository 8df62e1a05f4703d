"""The OpenClaw plugin's own tests (TypeScript, `integrations/openclaw`), run with npm: they start
a real `stratamem serve` of this checkout and drive the plugin through OpenClaw's hook runner.

`npm ci` runs when `node_modules` is missing or was installed from another package-lock.json
(the `openclaw` package is large: about a minute from npm's cache)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
PLUGIN = Path(__file__).resolve().parents[2] / "integrations" / "openclaw"
STAMP = PLUGIN / "node_modules" / ".stratamem-lock-sha256"


def _npm(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    npm = shutil.which("npm")
    assert npm is not None, "the OpenClaw plugin's tests need Node.js 20+ and npm on PATH"
    env = {**os.environ, "STRATAMEM_PYTHON": sys.executable}
    return subprocess.run(
        [npm, *args], cwd=PLUGIN, env=env, capture_output=True, text=True, timeout=timeout_s,
        check=False,
    )  # fmt: skip


def _installed() -> None:
    lock = hashlib.sha256((PLUGIN / "package-lock.json").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == lock:
        return
    done = _npm("ci", "--ignore-scripts", "--no-audit", "--no-fund", timeout_s=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    STAMP.write_text(lock)


def test_the_openclaw_plugin_suite_passes() -> None:
    _installed()
    done = _npm("test", timeout_s=600)
    report = done.stdout[-6000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    assert "ℹ fail 0" in done.stdout and "ℹ pass 0" not in done.stdout, report
