"""stratamem: layered long-term memory for AI agents."""

from stratamem.capture import CaptureResult
from stratamem.config import Settings
from stratamem.core import AsyncMemory, Recall
from stratamem.domain import (
    Hit,
    Layer,
    MemoryRecord,
    MemoryType,
    Message,
    Mode,
    Profile,
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
