"""The HTTP service: `create_app(Services.open(core_settings, server_settings))`.

The names below are imported on first use, so that importing `stratamem.api.settings` (the CLI
does, to know the service's variables) does not import the web framework."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stratamem.api.app import create_app
    from stratamem.api.services import Services
    from stratamem.api.settings import ServerSettings, load_settings

__all__ = ["ServerSettings", "Services", "create_app", "load_settings"]
_HOMES = {"create_app": "app", "Services": "services", "ServerSettings": "settings",
          "load_settings": "settings"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
