"""The Python client of `stratamem serve`: `Client` (synchronous) and `AsyncClient`.

They offer the calls of `stratamem.Memory` / `stratamem.AsyncMemory` (`stratamem.protocol`) with
the same records and errors, so code moves between the embedded memory and a service by changing
the constructor:

    memory = Memory(data_dir="./my-memory")                  # embedded
    memory = Client("http://127.0.0.1:8420", key)            # remote
"""

from stratamem.client.async_client import AsyncClient
from stratamem.client.records import UnexpectedAnswer
from stratamem.client.sync_client import Client
from stratamem.httpretry import RetryPolicy

__all__ = ["AsyncClient", "Client", "RetryPolicy", "UnexpectedAnswer"]
