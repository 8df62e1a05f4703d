"""psycopg connections as the shared record modules want them (`store/sql.py`).

`PgConn` wraps a psycopg connection: the shared modules' `?` placeholders become `%s`, rows answer
both `row[0]` and `row["column"]`, and database errors become the store's typed errors. The
pool's connections run in autocommit; a write is one explicit transaction (`PgPool.writing`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool, PoolTimeout

from stratamem.errors import StoreError
from stratamem.store.sql import DatabaseFailure, DuplicateRow

POOL_MIN = 1
POOL_MAX = 16
CONNECT_TIMEOUT_S = 30.0
_TRANSLATED: dict[str, bytes] = {}
_TRANSLATED_LOCK = threading.Lock()


def translate(sql: str) -> bytes:
    """`?` placeholders outside quoted text as `%s`, and a literal `%` as `%%` (cached)."""
    found = _TRANSLATED.get(sql)
    if found is not None:
        return found
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if quote is not None:
            quote = None if char == quote else quote
            out.append("%%" if char == "%" else char)
        elif char in "'\"":
            quote = char
            out.append(char)
        else:
            out.append("%s" if char == "?" else "%%" if char == "%" else char)
    translated = "".join(out).encode()
    with _TRANSLATED_LOCK:
        _TRANSLATED[sql] = translated
    return translated


class Row(tuple[Any, ...]):
    """A row read by position or by column name."""

    names: dict[str, int] = {}  # noqa: RUF012 - set per subclass by `_row_class`

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self.names)


_ROW_CLASSES: dict[tuple[str, ...], type[Row]] = {}


def _row_class(names: tuple[str, ...]) -> type[Row]:
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        cls = type("Row", (Row,), {"names": {n: i for i, n in enumerate(names)}})
        _ROW_CLASSES[names] = cls
    return cls


def row_factory(cursor: psycopg.Cursor[Any]) -> RowMaker[Row]:
    cls = _row_class(tuple(c.name for c in cursor.description or ()))
    return lambda values: cls(map(_decoded, values))


# PostgreSQL text cannot hold NUL, which captured text may: it is stored as `_ESC` + "0" (and a
# stored `_ESC` as two), and read back as it was written.
_NUL, _ESC = "\x00", "\U0010fffe"
_ESCAPED = re.compile(_ESC + "(.)", re.S)


def _encoded(value: Any) -> Any:
    if isinstance(value, str) and (_NUL in value or _ESC in value):
        return value.replace(_ESC, _ESC + _ESC).replace(_NUL, _ESC + "0")
    return value


def _decoded(value: Any) -> Any:
    if isinstance(value, str) and _ESC in value:
        return _ESCAPED.sub(lambda m: _NUL if m.group(1) == "0" else _ESC, value)
    return value


class PgCursor:
    def __init__(self, cursor: psycopg.Cursor[Row]) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Row]:
        return self._cursor.fetchall()


class PgConn:
    """A psycopg connection speaking the shared modules' SQL (`store/sql.py`)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, parameters: Any = (), /) -> PgCursor:
        cursor = self.raw.cursor(row_factory=row_factory)
        with translated_errors():
            cursor.execute(translate(sql), _params(parameters))
        return PgCursor(cursor)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> PgCursor:
        cursor = self.raw.cursor(row_factory=row_factory)
        rows = [_params(p) for p in parameters]
        if rows:
            with translated_errors():
                cursor.executemany(translate(sql), rows)
        return PgCursor(cursor)


def _params(parameters: Any) -> Any:
    if isinstance(parameters, Sequence):
        return [_encoded(p) for p in parameters]
    return parameters


@contextmanager
def translated_errors() -> Iterator[None]:
    try:
        yield
    except pg_errors.UniqueViolation as exc:
        raise DuplicateRow(str(exc)) from exc
    except psycopg.Error as exc:
        raise DatabaseFailure(f"PostgreSQL: {exc}") from exc


class PgPool:
    """A connection pool; reads in autocommit, writes in one transaction each."""

    def __init__(self, url: str, max_size: int = POOL_MAX) -> None:
        try:
            self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                url,
                min_size=POOL_MIN,
                max_size=max_size,
                kwargs={"autocommit": True},
                timeout=CONNECT_TIMEOUT_S,
                open=True,
            )
            self.pool.wait(CONNECT_TIMEOUT_S)
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def reading(self) -> Iterator[PgConn]:
        with translated_errors(), self.pool.connection() as conn:
            yield PgConn(conn)

    @contextmanager
    def writing(
        self,
        lock_keys: Sequence[str] = (),
        shared_keys: Sequence[str] = (),
        pipelined: bool = False,
    ) -> Iterator[PgConn]:
        """One transaction, holding an advisory lock per key until it ends: shared for
        `shared_keys` (taken first), exclusive for `lock_keys`. `pipelined`: statements whose
        results are not read go out without waiting for the server (psycopg's pipeline mode),
        so the transaction costs a round trip per result read, not one per statement; for
        callers that read what they need through `fetchone` / `fetchall` only (not `rowcount`)."""
        shared, exclusive = sorted(set(shared_keys)), sorted(set(lock_keys))
        locking = (_locking_sql(len(shared), len(exclusive)), [*shared, *exclusive])
        with translated_errors(), self.pool.connection() as conn:
            if pipelined:
                with _pipelined_transaction(conn):
                    if shared or exclusive:
                        conn.execute(*locking)
                    yield PgConn(conn)
                return
            with conn.transaction():
                if shared or exclusive:
                    conn.execute(*locking)
                yield PgConn(conn)


@contextmanager
def _pipelined_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """BEGIN … COMMIT in one pipeline, synced once, at the end: the transaction's round trips
    are its reads and its commit. psycopg's `transaction()` in pipeline mode nests pipelines
    and syncs at each level: a capture waited for the server five times (BEGIN alone, its
    read, the statements after it, COMMIT, the outer pipeline), now twice (issue 32). Whatever
    fails (a statement, which aborts the rest of the pipeline, or the caller's code between
    them), the transaction is rolled back before the connection goes back to the pool."""
    try:
        with conn.pipeline():
            conn.execute(b"BEGIN")
            yield
            conn.execute(b"COMMIT")
    except BaseException:
        if conn.pgconn.status == pq.ConnStatus.OK and (
            conn.pgconn.transaction_status != pq.TransactionStatus.IDLE
        ):
            conn.rollback()
        raise


def _locking_sql(shared: int, exclusive: int) -> bytes:
    """One statement taking the locks in one order (the shared keys, then the exclusive ones,
    each sorted), so two writers never deadlock."""
    calls = [f"pg_advisory_xact_lock_shared({_KEY})"] * shared
    calls += [f"pg_advisory_xact_lock({_KEY})"] * exclusive
    return f"SELECT {', '.join(calls)}".encode()


_KEY = "hashtextextended(%s, 0)"


def session_key(tenant: str, session: str) -> str:
    """The lock key of a tenant's session (a key shared by chance only serialises more)."""
    return f"{tenant}\x1f{session}"

