"""The HTTP service: `create_app(Services.open(core_settings, server_settings))`."""

from stratamem.api.app import create_app
from stratamem.api.services import Services
from stratamem.api.settings import ServerSettings, load_settings

__all__ = ["ServerSettings", "Services", "create_app", "load_settings"]
