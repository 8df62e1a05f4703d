"""stratamem: layered long-term memory for AI agents.

The public names are imported when first used (PEP 562), so that importing a part of the
package (the CLI printing its help, the REST client) does not load all of it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratamem.capture import CaptureResult
    from stratamem.config import Settings
    from stratamem.core import AsyncMemory
    from stratamem.domain import (
        Hit,
        Layer,
        MemoryRecord,
        MemoryType,
        Message,
        Mode,
        Profile,
        Recall,
        Role,
        Scene,
        Scope,
        Turn,
    )
    from stratamem.errors import (
        ConfigError,
        EmbeddingMismatch,
        InvalidIdentifier,
        InvalidInput,
        NotFound,
        StaleFencingToken,
        StratamemError,
    )
    from stratamem.sync import Memory

__version__ = "0.1.0"

_DOMAIN = ("Hit", "Layer", "MemoryRecord", "MemoryType", "Message", "Mode", "Profile", "Recall",
           "Role", "Scene", "Scope", "Turn")  # fmt: skip
_ERRORS = ("ConfigError", "EmbeddingMismatch", "InvalidIdentifier", "InvalidInput", "NotFound",
           "StaleFencingToken", "StratamemError")  # fmt: skip

#: Each public name and the module it comes from.
_HOME = {
    "CaptureResult": "capture",
    "Settings": "config",
    "AsyncMemory": "core",
    **dict.fromkeys(_DOMAIN, "domain"),
    **dict.fromkeys(_ERRORS, "errors"),
    "Memory": "sync",
}

__all__ = [
    "AsyncMemory",
    "CaptureResult",
    "ConfigError",
    "EmbeddingMismatch",
    "Hit",
    "InvalidIdentifier",
    "InvalidInput",
    "Layer",
    "Memory",
    "MemoryRecord",
    "MemoryType",
    "Message",
    "Mode",
    "NotFound",
    "Profile",
    "Recall",
    "Role",
    "Scene",
    "Scope",
    "Settings",
    "StaleFencingToken",
    "StratamemError",
    "Turn",
    "__version__",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'stratamem' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"stratamem.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
