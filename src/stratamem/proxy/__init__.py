"""The OpenAI-compatible memory proxy: `stratamem serve` answers `/openai/v1/chat/completions`
and `/openai/v1/models` and forwards to the upstream model of `STRATAMEM_PROXY_UPSTREAM`, with
recall injected before the call, compaction over budget, and the exchange captured after it.

`precall` (recall, compaction, the request rewritten), `postcall` (capture, offload), `stream`
(server-sent events followed as they pass) and `tools` (`read_tool_result`, answered by the
proxy) are each a small unit; `service.MemoryProxy` puts them around the upstream call.

The names below are imported on first use, so that the CLI can read `stratamem.proxy.settings`
without importing the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratamem.proxy.answers import Answer, StreamAnswer, WholeAnswer
    from stratamem.proxy.deps import ProxyDeps
    from stratamem.proxy.service import MemoryProxy
    from stratamem.proxy.settings import ProxySettings

__all__ = ["Answer", "MemoryProxy", "ProxyDeps", "ProxySettings", "StreamAnswer", "WholeAnswer"]
_HOMES = {"Answer": "answers", "StreamAnswer": "answers", "WholeAnswer": "answers",
          "ProxyDeps": "deps", "MemoryProxy": "service", "ProxySettings": "settings"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
