"""What the store modules shared by SQLite and PostgreSQL need of a database connection.

The layer, offload, failure and tenant records are written by the same code on both databases
(`layers/store.py`, `offload/store.py`, `failures/rows.py`, `tenants/store.py`): their SQL is the
common subset (`?` placeholders, `ON CONFLICT … DO NOTHING / DO UPDATE`, `RETURNING`), and the
store they run on lends them a connection through `reading()` and `writing()`. A
`sqlite3.Connection` is such a connection as it is; the PostgreSQL store adapts psycopg's
(`store/postgres/connection.py`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from stratamem.domain import Scope
from stratamem.errors import StoreError
from stratamem.store.core.port import Fence


class DuplicateRow(StoreError):
    """A write broke a uniqueness rule (raised by connections other than SQLite's)."""


class DatabaseFailure(StoreError):
    """The database failed a statement (raised by connections other than SQLite's)."""


#: What a connection raises when a write breaks a uniqueness rule.
DUPLICATE: tuple[type[Exception], ...] = (sqlite3.IntegrityError, DuplicateRow)
#: What a connection raises when a statement fails.
DATABASE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, DatabaseFailure)


class SqlCursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class SqlConn(Protocol):
    """Rows read through it answer both `row[0]` and `row["column"]`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> SqlCursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> SqlCursor: ...


class SqlStore(Protocol):
    """A store that lends its connection to the shared record modules."""

    def reading(self) -> AbstractContextManager[SqlConn]:
        """The connection, for reads."""

    def writing(
        self, fence: Fence | None = None, key: str | None = None
    ) -> AbstractContextManager[SqlConn]:
        """One write transaction: with a `fence`, refused unless its token is the newest; with
        a `key` (a tenant), serialised with the other writes under the same key (SQLite
        serialises every write anyway)."""

    def erase_tenant(self, scope: Scope) -> dict[str, int]: ...
