"""stratamem: layered long-term memory for AI agents."""

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

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EmbeddingMismatch",
    "Hit",
    "InvalidIdentifier",
    "InvalidInput",
    "Layer",
    "MemoryRecord",
    "MemoryType",
    "Message",
    "Mode",
    "NotFound",
    "Profile",
    "Role",
    "Scene",
    "Scope",
    "StaleFencingToken",
    "StratamemError",
    "Turn",
    "__version__",
]
