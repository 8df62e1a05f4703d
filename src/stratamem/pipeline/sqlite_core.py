"""The SQL of the embedded pipeline backend: schema, migrations and one short transaction per
operation (`SqliteCore`, synchronous). `SqliteBackend` is its asyncio shell."""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from stratamem.errors import InvalidInput
from stratamem.files import create_private, enter_wal
from stratamem.pipeline.backend import DELIVERY_LIMIT_ERROR, new_dead_id, retry_timer_key
from stratamem.pipeline.errors import BackendUnavailable, DeadLetterNotFound
from stratamem.pipeline.task import (
    DeadLetter,
    Delivery,
    InFlight,
    LockGrant,
    QueueDepth,
    Task,
)
from stratamem.pipeline.task_type import TaskType, registered
from stratamem.store.evidence.receipts import Attempt

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

BUSY_TIMEOUT_MS = 10_000

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_pipeline",
        """
        CREATE TABLE tasks (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL,
            body TEXT NOT NULL,
            enqueued_at REAL NOT NULL,
            consumer TEXT,
            leased_at REAL,
            lease_token TEXT,
            deliveries INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX tasks_ready ON tasks (consumer, seq);
        CREATE TABLE locks (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL);
        CREATE TABLE lock_fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL);
        CREATE TABLE timers (key TEXT PRIMARY KEY, due_at REAL NOT NULL, body TEXT NOT NULL);
        CREATE INDEX timers_due ON timers (due_at);
        CREATE TABLE session_state (
            scope TEXT NOT NULL, field TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (scope, field)
        );
        CREATE TABLE dead_letters (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            body TEXT NOT NULL,
            error TEXT NOT NULL,
            failed_at REAL NOT NULL
        );
        """,
    ),
    (
        "0002_task_type_routing",
        """
        ALTER TABLE tasks ADD COLUMN type TEXT NOT NULL DEFAULT '';
        UPDATE tasks SET type = json_extract(body, '$.type');
        CREATE INDEX tasks_ready_by_type ON tasks (consumer, type, seq)
        """,
    ),
    (
        "0003_execution_stamp",
        "ALTER TABLE tasks ADD COLUMN stamp TEXT",
    ),
    (
        # Dead letters are listed per tenant through an index and paged by a cursor; their ids
        # are random (a global sequence told each tenant how many failures others had).
        "0004_dead_letters_by_tenant",
        """
        ALTER TABLE dead_letters ADD COLUMN id TEXT;
        ALTER TABLE dead_letters ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
        UPDATE dead_letters SET id = 'dl_' || lower(hex(randomblob(12))),
            tenant = json_extract(body, '$.tenant');
        CREATE UNIQUE INDEX dead_letters_id ON dead_letters (id);
        CREATE INDEX dead_letters_by_tenant ON dead_letters (tenant, seq)
        """,
    ),
    (
        # A counter per task type that `notify_free` raises: waiters in other processes poll it.
        "0005_wake_counters",
        "CREATE TABLE wakes (type TEXT PRIMARY KEY, notices INTEGER NOT NULL)",
    ),
    (
        # Timers whose task could not be read when they came due (a damaged row, a task type
        # this version does not know): set aside for an operator instead of failing every pump.
        "0006_unreadable_timers",
        """
        CREATE TABLE unreadable_timers (
            key TEXT NOT NULL, due_at REAL NOT NULL, body TEXT NOT NULL, error TEXT NOT NULL,
            found_at REAL NOT NULL
        )
        """,
    ),
)


def translated(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"SQLite pipeline store failed: {exc}") from exc

    return wrapper


def connect(path: Path) -> sqlite3.Connection:
    """Open `path` in WAL mode, autocommit (explicit transactions), and apply migrations."""
    create_private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    enter_wal(conn, BUSY_TIMEOUT_MS / 1000)
    conn.execute("PRAGMA synchronous = NORMAL")
    _migrate(conn)
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY)")
        done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
        for name, script in MIGRATIONS:
            if name in done:
                continue
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (name) VALUES (?)", (name,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SqliteCore:
    """Synchronous implementation. One connection per process, guarded by a re-entrant mutex;
    `SqliteBackend` calls it on the event loop when the file is free and in a thread when not."""

    def __init__(self, path: Path) -> None:
        self.conn = connect(path)
        self.mutex = threading.RLock()
        self._busy_timeout_ms = BUSY_TIMEOUT_MS

    def set_busy_timeout(self, ms: int) -> None:
        """0 on the event loop (never block it: fail fast and retry in a thread)."""
        if ms != self._busy_timeout_ms:
            self.conn.execute(f"PRAGMA busy_timeout = {int(ms)}")
            self._busy_timeout_ms = ms

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self.mutex:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self.mutex:
            yield self.conn

    # queue
    def enqueue(self, task: Task, now: float) -> None:
        with self.write() as c:
            _insert_task(c, task, now)

    def has_ready(self, types: Sequence[TaskType] | None) -> bool:
        where, params = _of_types(types)
        with self.read() as c:
            row = c.execute(
                f"SELECT 1 FROM tasks WHERE consumer IS NULL{where} LIMIT 1", params
            ).fetchone()
        return row is not None

    def consume(
        self, consumer: str, count: int, now: float, types: Sequence[TaskType] | None
    ) -> list[Delivery]:
        token = uuid.uuid4().hex
        where, params = _of_types(types)
        with self.write() as c:
            rows = c.execute(
                "UPDATE tasks SET consumer = ?, leased_at = ?, lease_token = ?,"
                " deliveries = deliveries + 1 WHERE seq IN"
                f" (SELECT seq FROM tasks WHERE consumer IS NULL{where} ORDER BY seq LIMIT ?)"
                " RETURNING seq, body, deliveries, enqueued_at",
                (consumer, now, token, *params, count),
            ).fetchall()
        rows.sort(key=lambda r: r[0])
        return [_delivery(row, consumer, token) for row in rows]

    def ack(self, receipt: str) -> bool:
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            cur = c.execute("DELETE FROM tasks WHERE seq = ? AND lease_token = ?", (seq, token))
        return cur.rowcount == 1

    def release_and_ack(self, receipt: str, grant: LockGrant | None) -> bool:
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            if grant is not None:
                c.execute("DELETE FROM locks WHERE key = ? AND owner = ?", (grant.key, grant.owner))
            cur = c.execute("DELETE FROM tasks WHERE seq = ? AND lease_token = ?", (seq, token))
        return cur.rowcount == 1

    def extend(self, receipt: str, now: float) -> bool:
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            cur = c.execute(
                "UPDATE tasks SET leased_at = ? WHERE seq = ? AND lease_token = ?",
                (now, seq, token),
            )
        return cur.rowcount == 1

    def stamp(self, receipt: str, attempt: Attempt, now: float) -> bool:
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            cur = c.execute(
                "UPDATE tasks SET stamp = ?, leased_at = ? WHERE seq = ? AND lease_token = ?",
                (json.dumps(attempt.to_json()), now, seq, token),
            )
        return cur.rowcount == 1

    def in_flight(self, limit: int, now: float) -> list[InFlight]:
        with self.read() as c:
            rows = c.execute(
                "SELECT seq, body, deliveries, enqueued_at, stamp, consumer, lease_token, leased_at"
                " FROM tasks WHERE consumer IS NOT NULL ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [
            InFlight(_delivery(row[:5], row[5], row[6]), max(0.0, now - float(row[7])))
            for row in rows
        ]

    def reclaim(
        self,
        consumer: str,
        min_idle_ms: int,
        count: int,
        max_deliveries: int,
        now: float,
        types: Sequence[TaskType] | None,
    ) -> list[Delivery]:
        token = uuid.uuid4().hex
        where, params = _of_types(types)
        with self.write() as c:
            rows = c.execute(
                "UPDATE tasks SET consumer = ?, leased_at = ?, lease_token = ?,"
                " deliveries = deliveries + 1 WHERE seq IN"
                " (SELECT seq FROM tasks WHERE consumer IS NOT NULL AND leased_at <= ?"
                f"{where} ORDER BY seq LIMIT ?)"
                " RETURNING seq, body, deliveries, enqueued_at, stamp",
                (consumer, now, token, now - min_idle_ms / 1000, *params, count),
            ).fetchall()
            rows.sort(key=lambda r: r[0])
            kept = []
            for row in rows:
                if row[2] > max_deliveries:
                    _bury(c, row[0], row[1], DELIVERY_LIMIT_ERROR, now)
                else:
                    kept.append(_delivery(row, consumer, token))
        return kept

    def retry(self, receipt: str, task: Task, due_at: float) -> bool:
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            cur = c.execute("DELETE FROM tasks WHERE seq = ? AND lease_token = ?", (seq, token))
            if cur.rowcount != 1:
                return False
            _upsert_timer(c, retry_timer_key(task), task, due_at)
        return True

    # wake-ups
    def notify_free(self, types: Sequence[TaskType]) -> None:
        with self.write() as c:
            c.executemany(
                "INSERT INTO wakes (type, notices) VALUES (?, 1) ON CONFLICT (type)"
                " DO UPDATE SET notices = notices + 1",
                [(t.name,) for t in types],
            )

    def wake_counters(self) -> dict[str, int]:
        """The notices given per task type so far."""
        with self.read() as c:
            return {row[0]: int(row[1]) for row in c.execute("SELECT type, notices FROM wakes")}

    def depth(self) -> QueueDepth:
        with self.read() as c:
            ready, flight = c.execute(
                "SELECT COALESCE(SUM(consumer IS NULL), 0), COALESCE(SUM(consumer IS NOT NULL), 0)"
                " FROM tasks"
            ).fetchone()
            per_type = c.execute("SELECT type, COUNT(*) FROM tasks GROUP BY type").fetchall()
            (timers,) = c.execute("SELECT COUNT(*) FROM timers").fetchone()
            (dead,) = c.execute("SELECT COUNT(*) FROM dead_letters").fetchone()
        known = registered()
        queued = {known.get(t): n for t, n in per_type if t in known.names()}
        return QueueDepth(ready=ready, in_flight=flight, timers=timers, dead=dead, queued=queued)

    def list_tasks(self, limit: int) -> list[Task]:
        with self.read() as c:
            rows = c.execute("SELECT body FROM tasks ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [Task.from_json(r[0]) for r in rows]

    # locks
    def acquire_lock(self, key: str, owner: str, ttl_ms: int, now: float) -> LockGrant | None:
        with self.write() as c:
            return _acquire(c, key, owner, ttl_ms, now)

    def acquire_for(
        self, receipt: str, lock: tuple[str, str], ttl_ms: int, now: float, stamp: Attempt | None
    ) -> LockGrant | Literal[False] | None:
        """`extend`, `acquire_lock` and `stamp` (with the grant's token) in one transaction;
        False when the delivery is no longer its consumer's."""
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            cur = c.execute(
                "UPDATE tasks SET leased_at = ? WHERE seq = ? AND lease_token = ?",
                (now, seq, token),
            )
            if cur.rowcount != 1:
                return False
            grant = _acquire(c, *lock, ttl_ms, now)
            if grant is not None and stamp is not None:
                c.execute(
                    "UPDATE tasks SET stamp = ? WHERE seq = ?",
                    (json.dumps(replace(stamp, token=grant.token).to_json()), seq),
                )
        return grant

    def renew_lock(self, key: str, owner: str, ttl_ms: int, now: float) -> bool:
        with self.write() as c:
            cur = c.execute(
                "UPDATE locks SET expires_at = ? WHERE key = ? AND owner = ? AND expires_at > ?",
                (now + ttl_ms / 1000, key, owner, now),
            )
        return cur.rowcount == 1

    def renew_locks(self, keys: Sequence[str], owner: str, ttl_ms: int, now: float) -> set[str]:
        renewed = set[str]()
        with self.write() as c:
            for key in keys:
                cur = c.execute(
                    "UPDATE locks SET expires_at = ? WHERE key = ? AND owner = ?"
                    " AND expires_at > ?",
                    (now + ttl_ms / 1000, key, owner, now),
                )
                if cur.rowcount == 1:
                    renewed.add(key)
        return renewed

    def release_lock(self, key: str, owner: str) -> bool:
        with self.write() as c:
            cur = c.execute("DELETE FROM locks WHERE key = ? AND owner = ?", (key, owner))
        return cur.rowcount == 1

    def fence_token(self, key: str) -> int:
        with self.read() as c:
            row = c.execute("SELECT token FROM lock_fences WHERE key = ?", (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def raise_fence(self, key: str, token: int) -> bool:
        upsert = ("INSERT INTO lock_fences (key, token) VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
                  " SET token = excluded.token WHERE lock_fences.token < excluded.token")
        with self.write() as c:
            return c.execute(upsert, (key, token)).rowcount == 1

    # timers
    def set_timer(self, key: str, task: Task, due_at: float) -> None:
        with self.write() as c:
            _upsert_timer(c, key, task, due_at)

    def set_timer_if_earlier(self, key: str, task: Task, due_at: float) -> bool:
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO timers (key, due_at, body) VALUES (?, ?, ?) ON CONFLICT (key)"
                " DO UPDATE SET due_at = excluded.due_at, body = excluded.body"
                " WHERE excluded.due_at < timers.due_at",
                (key, due_at, task.to_json()),
            )
        return cur.rowcount == 1

    def remove_timer(self, key: str) -> bool:
        with self.write() as c:
            cur = c.execute("DELETE FROM timers WHERE key = ?", (key,))
        return cur.rowcount == 1

    def get_timer(self, key: str) -> tuple[float, Task] | None:
        with self.read() as c:
            row = c.execute("SELECT due_at, body FROM timers WHERE key = ?", (key,)).fetchone()
        return None if row is None else (float(row[0]), Task.from_json(row[1]))

    def fire_due_timers(self, now: float, limit: int) -> list[Task]:
        with self.write() as c:
            rows = c.execute(
                "DELETE FROM timers WHERE key IN"
                " (SELECT key FROM timers WHERE due_at <= ? ORDER BY due_at LIMIT ?)"
                " RETURNING key, due_at, body",
                (now, limit),
            ).fetchall()
            tasks = []
            for key, due_at, body in sorted(rows, key=lambda row: row[1]):
                try:
                    tasks.append(Task.from_json(body))
                except InvalidInput as exc:  # UnknownTaskType too
                    _set_aside(c, key, due_at, body, exc, now)
            for task in tasks:
                _insert_task(c, task, now)
        return tasks

    # state
    def state_incr(self, scope: str, field: str, by: int) -> int:
        with self.write() as c:
            (value,) = c.execute(
                "INSERT INTO session_state (scope, field, value) VALUES (?, ?, ?)"
                " ON CONFLICT (scope, field) DO UPDATE"
                " SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT) RETURNING value",
                (scope, field, str(by), by),
            ).fetchone()
        return int(value)

    def state_set(self, scope: str, field: str, value: str) -> None:
        with self.write() as c:
            c.execute(
                "INSERT INTO session_state (scope, field, value) VALUES (?, ?, ?)"
                " ON CONFLICT (scope, field) DO UPDATE SET value = excluded.value",
                (scope, field, value),
            )

    def state_get(self, scope: str) -> dict[str, str]:
        with self.read() as c:
            rows = c.execute(
                "SELECT field, value FROM session_state WHERE scope = ?", (scope,)
            ).fetchall()
        return {str(f): str(v) for f, v in rows}

    def state_delete(self, scope: str, fields: list[str]) -> int:
        with self.write() as c:
            return sum(
                c.execute(
                    "DELETE FROM session_state WHERE scope = ? AND field = ?", (scope, f)
                ).rowcount
                for f in fields
            )

    # dead letters
    def dead_letter(self, receipt: str, error: str, now: float) -> DeadLetter | None:
        seq, token = _parse_receipt(receipt)
        with self.write() as c:
            row = c.execute(
                "SELECT body FROM tasks WHERE seq = ? AND lease_token = ?", (seq, token)
            ).fetchone()
            if row is None:
                return None
            dead_id = _bury(c, seq, row[0], error, now)
        return DeadLetter(id=dead_id, task=Task.from_json(row[0]), error=error, failed_at=now)

    def list_dead(self, limit: int, tenant: str | None, after: str | None) -> list[DeadLetter]:
        params: list[Any] = [] if tenant is None else [tenant]
        where = "" if tenant is None else "WHERE tenant = ?"
        with self.read() as c:
            if after is not None:
                where += " AND " if where else "WHERE "
                where += "seq > ?"
                params.append(_dead_seq(c, after, tenant))
            rows = c.execute(
                f"SELECT id, body, error, failed_at FROM dead_letters {where} ORDER BY seq LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [
            DeadLetter(id=i, task=Task.from_json(b), error=e, failed_at=f) for i, b, e, f in rows
        ]

    def count_dead(self, tenant: str | None) -> int:
        with self.read() as c:
            if tenant is None:
                return int(c.execute("SELECT COUNT(*) FROM dead_letters").fetchone()[0])
            row = c.execute("SELECT COUNT(*) FROM dead_letters WHERE tenant = ?", (tenant,))
            return int(row.fetchone()[0])

    def requeue_dead(self, dead_id: str, now: float, tenant: str | None) -> Task:
        with self.write() as c:
            row = c.execute(
                "DELETE FROM dead_letters WHERE id = ? AND tenant = COALESCE(?, tenant)"
                " RETURNING body",
                (dead_id, tenant),
            ).fetchone()
            if row is None:
                raise DeadLetterNotFound(f"no dead letter {dead_id!r}")
            task = Task.from_json(row[0])
            task = Task(task.type, task.tenant, task.session, task.payload, 0, task.id)
            _insert_task(c, task, now)
        return task

    def purge_dead(self, dead_ids: list[str] | None) -> int:
        with self.write() as c:
            if dead_ids is None:
                return c.execute("DELETE FROM dead_letters").rowcount
            return sum(
                c.execute("DELETE FROM dead_letters WHERE id = ?", (d,)).rowcount for d in dead_ids
            )


def is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _insert_task(c: sqlite3.Connection, task: Task, now: float) -> None:
    c.execute(
        "INSERT INTO tasks (id, type, body, enqueued_at) VALUES (?, ?, ?, ?)",
        (task.id, task.type.name, task.to_json(), now),
    )


def _of_types(types: Sequence[TaskType] | None) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (with its parameters) keeping tasks of `types` (None: every type)."""
    if types is None:
        return "", ()
    values = tuple(sorted({str(t) for t in types}))
    return f" AND type IN ({', '.join('?' for _ in values)})", values


def _upsert_timer(c: sqlite3.Connection, key: str, task: Task, due_at: float) -> None:
    c.execute(
        "INSERT INTO timers (key, due_at, body) VALUES (?, ?, ?) ON CONFLICT (key)"
        " DO UPDATE SET due_at = excluded.due_at, body = excluded.body",
        (key, due_at, task.to_json()),
    )


def _set_aside(
    c: sqlite3.Connection, key: str, due_at: float, body: str, exc: Exception, now: float
) -> None:
    """Keep a timer whose task cannot be read in `unreadable_timers`, and say so."""
    c.execute(
        "INSERT INTO unreadable_timers (key, due_at, body, error, found_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (key, due_at, body, str(exc), now),
    )
    log.error("timer %r has a task that cannot be read (%s): set aside in the pipeline"
              " store's unreadable_timers table", key, exc)  # fmt: skip


def _bury(c: sqlite3.Connection, seq: int, body: str, error: str, now: float) -> str:
    c.execute("DELETE FROM tasks WHERE seq = ?", (seq,))
    dead_id = new_dead_id()
    c.execute(
        "INSERT INTO dead_letters (id, tenant, body, error, failed_at) VALUES (?, ?, ?, ?, ?)",
        (dead_id, json.loads(body)["tenant"], body, error, now),
    )
    return dead_id


def _delivery(row: tuple[Any, ...], consumer: str, token: str) -> Delivery:
    seq, body, deliveries, enqueued_at, *rest = row
    stamp = rest[0] if rest else None
    return Delivery(
        task=Task.from_json(body),
        receipt=f"{seq}:{token}",
        consumer=consumer,
        deliveries=int(deliveries),
        enqueued_at=float(enqueued_at),
        stamp=None if stamp is None else Attempt.from_json(json.loads(stamp)),
    )


def _parse_receipt(receipt: str) -> tuple[int, str]:
    seq, _, token = receipt.partition(":")
    return int(seq), token


def _dead_seq(c: sqlite3.Connection, dead_id: str, tenant: str | None) -> int:
    """The position of the dead letter `dead_id` (a page cursor)."""
    row = c.execute(
        "SELECT seq FROM dead_letters WHERE id = ? AND tenant = COALESCE(?, tenant)",
        (dead_id, tenant),
    ).fetchone()
    if row is None:
        raise DeadLetterNotFound(f"no dead letter {dead_id!r} to page after")
    return int(row[0])


def _acquire(
    c: sqlite3.Connection, key: str, owner: str, ttl_ms: int, now: float
) -> LockGrant | None:
    row = c.execute("SELECT expires_at FROM locks WHERE key = ?", (key,)).fetchone()
    if row is not None and row[0] > now:
        return None
    c.execute(
        "INSERT INTO locks (key, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (key)"
        " DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at",
        (key, owner, now + ttl_ms / 1000),
    )
    (token,) = c.execute(
        "INSERT INTO lock_fences (key, token) VALUES (?, 1) ON CONFLICT (key)"
        " DO UPDATE SET token = token + 1 RETURNING token",
        (key,),
    ).fetchone()
    return LockGrant(key=key, owner=owner, token=int(token))
