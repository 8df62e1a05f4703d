"""`Client`: the synchronous facade (`stratamem.facade.SyncFacade`) over `AsyncClient`."""

from __future__ import annotations

from typing import Any

from stratamem.client.async_client import AsyncClient
from stratamem.facade import SyncFacade


class Client(SyncFacade):
    """`Client(url, key)`: the same calls as `stratamem.Memory`, answered by a service."""

    core: AsyncClient

    def __init__(self, url: str | None = None, key: str | None = None, **options: Any) -> None:
        super().__init__()
        try:
            self.core = AsyncClient(url, key, **options)
        except BaseException:
            self._portal.stop()
            raise

    def tenant(self) -> str:
        """The tenant of this client's key."""
        return self.run(self.core.tenant())

    def retry_failures(self, tenant: str, **filters: str | None) -> dict[str, Any]:
        """Re-run now the open failure records of a session, stage or kind
        (`AsyncClient.retry_failures`)."""
        return self.run(self.core.retry_failures(tenant, **filters))

    def __enter__(self) -> Client:
        return self
