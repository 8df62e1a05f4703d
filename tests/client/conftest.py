"""The service fixtures of the API tests (a fresh store per test)."""

from tests.api.conftest import client, services

__all__ = ["client", "services"]
