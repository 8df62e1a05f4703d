"""What the proxy's steps work with, and the rule they share: memory never blocks the call.

Every memory step (recall, compaction, capture, offload) runs through `guarded`: a step that
fails, or takes longer than its bound, is logged and counted (`/metrics`:
`stratamem_proxy_<step>_failures_total`, `…_timeouts_total`), and the call goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from stratamem.core import AsyncMemory
from stratamem.errors import StratamemError
from stratamem.offload import Offload
from stratamem.proxy.settings import ProxySettings

log = logging.getLogger("stratamem.proxy")
T = TypeVar("T")
Count = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class ProxyDeps:
    memory: AsyncMemory
    offload: Offload | None
    settings: ProxySettings
    count: Count
    """Adds to a named event counter (the service's metrics)."""
    admit_capture: Callable[[str], Awaitable[None]]
    """Raises (`Throttled`) while a tenant may not capture (too many records wait for a
    vector)."""


async def guarded(
    deps: ProxyDeps, step: str, work: Awaitable[T], timeout_s: float | None = None
) -> T | None:
    """`work`'s result, or None when it failed or overran `timeout_s` (logged, counted)."""
    try:
        if timeout_s is None:
            return await work
        return await asyncio.wait_for(work, timeout_s)
    except TimeoutError:
        log.warning("proxy: %s took longer than %g s; the call goes on without it", step,
                    timeout_s)  # fmt: skip
        deps.count(f"proxy_{step}_timeouts", 1)
    except StratamemError as exc:
        log.warning("proxy: %s failed (%s: %s); the call goes on without it", step,
                    type(exc).__name__, exc)  # fmt: skip
        deps.count(f"proxy_{step}_failures", 1)
    except Exception:  # the proxy's promise: memory never blocks the call. An unexpected
        # failure is not hidden: it is logged with its traceback, and counted.
        log.exception("proxy: %s failed unexpectedly; the call goes on without it", step)
        deps.count(f"proxy_{step}_failures", 1)
    return None
