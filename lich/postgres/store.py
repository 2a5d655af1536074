"""The PostgreSQL :class:`~lich.sessions.SessionStore`.

Tables (see :mod:`lich.postgres.schema`): ``lich_sessions``, one row per session
with its owner's ``epoch`` and the ``next_seq`` its next record must have, and
``lich_records``, one row per record, primary key ``(session_id, seq)``.

**Fencing.** A writer claims its session before its first record: the claim
bumps the session's epoch (or creates the row at epoch 1) and the writer keeps
the new epoch. Every append is one statement that advances ``next_seq`` and
inserts the record only if the session's epoch is still the writer's and
``next_seq`` is the seq the writer expects; otherwise nothing is written and
the writer raises :class:`~lich.sessions.StaleWriter` and writes nothing more.
So a writer that stalled while another one took its conversation cannot add a
record, and the seqs of a session are contiguous.

**Not blocking the event loop.** The agent appends from synchronous callbacks on
the event loop; :meth:`PostgresWriter.append` only encodes the record and puts it
in the writer's queue. Each writer's records are stored in order by one task at
a time on a thread pool of ``pool_size`` threads (each with a connection of the
pool while it works), so a turn costs the loop a queue put per record, and the
run's end waits (``aclose``, awaited, not blocking) until everything is stored.
The sync psycopg API on threads was chosen over the async one because the
appends come from sync callbacks, and the CLI and TUI read synchronously: one
API serves both, with no event loop to own.

**Restarts.** A statement that fails because the connection broke (the server
restarted, the network dropped) is retried on a new connection, with backoff,
for up to ``reconnect_s``; an append that committed before its connection broke
is recognised on the retry (its row, with the writer's epoch, is there), so a
restart neither loses nor doubles a record. Past ``reconnect_s`` the writer
fails with :class:`~lich.sessions.StoreError` and writes nothing more (the
agent logs it and the run goes on without its transcript).

**Never reached.** A database this process has not reached yet is not a restart
to ride out: the first statement fails at the pool's first failed connection
attempt (or after ``connect_timeout_s``), with libpq's reason, so ``lich
sessions list`` against a database that is down is one error line at once. The
pool's own log lines for each attempt are dropped: the store's one line says it.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from lich import serialization
from lich.postgres.schema import migrate
from lich.postgres.settings import PostgresStoreSettings
from lich.sessions import (
    RECORD_VERSION,
    JsonlSessionStore,
    SessionAmbiguous,
    SessionContents,
    SessionInfo,
    SessionNotFound,
    StaleWriter,
    StoreError,
    apply_record,
    encode_record,
    is_valid_session_id,
    repair_dangling_tool_calls,
    run_cost,
    sanitize,
)
from lich.types import Message

__all__ = ["PostgresStore", "PostgresWriter", "StoreUnavailable", "describe_dsn",
           "dsn_has_password", "dsn_is_valid"]

log = logging.getLogger("lich.postgres")

T = TypeVar("T")
Conn = psycopg.Connection[Any]

_TITLE_LIMIT = 80
_READERS = 2  # connections beyond the writer threads' (see PostgresStore._open_pool)
_POOL_NAME = "lich-session-store"
_FIRST_CONNECT_POLL_S = 0.05  # how often a first checkout looks for a failed attempt


class _QuietPool(logging.Filter):
    """Drops psycopg_pool's line for each failed connection attempt of the store's
    pools: the store reports the failure itself, once, with what it was doing."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (record.levelno <= logging.WARNING and _POOL_NAME in args)


logging.getLogger("psycopg.pool").addFilter(_QuietPool())


class StoreUnavailable(StoreError):
    """The database could not be reached (or kept failing) for ``reconnect_s``."""


def describe_dsn(dsn: str) -> str:
    """``postgres user@host:port/dbname`` for people: the DSN without its password
    (or any other parameter)."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "postgres (an unparsable DSN)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host") or "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    dbname = f"/{parts['dbname']}" if parts.get("dbname") else ""
    return f"postgres {user}{host}{port}{dbname}"


def dsn_is_valid(dsn: str) -> bool:
    """Whether libpq can parse ``dsn`` (nothing is connected)."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return False
    return True


def dsn_has_password(dsn: str) -> bool:
    """Whether the DSN itself holds a password."""
    try:
        return bool(psycopg.conninfo.conninfo_to_dict(dsn).get("password"))
    except psycopg.ProgrammingError:
        return False


_CLAIM = """
    INSERT INTO lich_sessions AS s (session_id, epoch, next_seq, created, modified)
    VALUES (%(sid)s, 1, 1, %(now)s, %(now)s)
    ON CONFLICT (session_id) DO UPDATE SET epoch = s.epoch + 1
    RETURNING epoch, next_seq
"""

# The claims of a writer told the session's end (claim_after): no row comes back, and
# the epoch stays, when a record was added since. An empty session may not exist yet;
# one with records must. A claim does not move next_seq, so one retried after its
# connection broke finds the same next_seq (and bumps once more).
_CLAIM_EMPTY = """
    INSERT INTO lich_sessions AS s (session_id, epoch, next_seq, created, modified)
    VALUES (%(sid)s, 1, 1, %(now)s, %(now)s)
    ON CONFLICT (session_id) DO UPDATE SET epoch = s.epoch + 1 WHERE s.next_seq = 1
    RETURNING epoch, next_seq
"""
_CLAIM_AT = """
    UPDATE lich_sessions SET epoch = epoch + 1
     WHERE session_id = %(sid)s AND next_seq = %(next)s
    RETURNING epoch, next_seq
"""

# One statement: the session row is advanced (and locked) only with the writer's epoch
# and the expected seq, and the record is inserted only if it was. A concurrent claim
# holds the same row lock; once it commits, this WHERE no longer matches.
_APPEND = """
    WITH advanced AS (
        UPDATE lich_sessions
           SET next_seq = next_seq + 1,
               modified = %(ts)s,
               size = size + %(size)s,
               title = coalesce(title, %(title)s::text),
               status = coalesce(%(status)s::text, status),
               answered = CASE WHEN %(reset)s THEN false ELSE answered OR %(answered)s END,
               cost_usd = CASE WHEN %(ended)s
                               THEN coalesce(cost_usd, 0) + coalesce(%(cost)s::float8, 0)
                               ELSE cost_usd END,
               cost_unknown = cost_unknown OR (%(ended)s AND %(cost)s::float8 IS NULL)
         WHERE session_id = %(sid)s AND epoch = %(epoch)s AND next_seq = %(seq)s
     RETURNING session_id
    )
    INSERT INTO lich_records (session_id, seq, epoch, ts, kind, record)
    SELECT session_id, %(seq)s, %(epoch)s, %(ts)s, %(kind)s, %(record)s FROM advanced
"""

# A session row with next_seq = 1 has no record: a writer claimed it and has not written
# yet. Such a session does not exist for readers (as a JSONL file not yet created).


def _summary(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """What an append changes in the session row, as :func:`lich.sessions` derives the
    title, the last run's status and the runs' cost from a file."""
    title = status = cost = None
    reset = answered = ended = False
    if kind == "message":
        message = fields.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            assert isinstance(message, dict)
            lines = str(message.get("content", "")).strip().splitlines()
            # As the record itself is: NULs and lone surrogates replaced.
            title = sanitize((lines[0] if lines else "")[:_TITLE_LIMIT])
        elif role == "assistant":
            answered = True
    elif kind == "meta":
        if fields.get("event") == "run_start":
            status, reset = "open", True
        elif fields.get("event") == "run_end":
            status = str(fields.get("stopped_reason") or "")
            ended, cost = True, run_cost(fields)
    return {"title": title, "status": status, "reset": reset, "answered": answered,
            "ended": ended, "cost": cost}


class _Op:
    """One queued step of a writer: a record to store, or a barrier (flush or claim)."""

    __slots__ = ("future", "params", "what")

    def __init__(self, what: str, params: dict[str, Any] | None = None,
                 future: concurrent.futures.Future[Any] | None = None) -> None:
        self.what = what
        self.params = params
        self.future = future


class PostgresStore:
    """Sessions in one PostgreSQL database (see the module docstring).

    Nothing connects until first use; the first use migrates the schema
    (:mod:`lich.postgres.schema`). Thread-safe.

    :param dsn: a libpq DSN or URI; it never appears in a message or a log
        (:meth:`describe` shows user, host, port and database only).
    """

    fenced = True

    def __init__(self, dsn: str, settings: PostgresStoreSettings | None = None) -> None:
        self._dsn = dsn
        self.settings = settings or PostgresStoreSettings(dsn="(given)")
        self._where = describe_dsn(dsn)
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Conn] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._migrated = False
        self._closed = False
        self._local = threading.local()  # the connection a writer's task holds
        # Set once a connection was had: from then on a failure is a restart to ride out.
        self._reached = threading.Event()
        # The last failed connection attempt of the pool (its worker thread sets it).
        self._connect_failure: psycopg.OperationalError | None = None

    # ------------------------------------------------------------ connections

    def _open_pool(self) -> ConnectionPool[Conn]:
        with self._lock:
            if self._closed:
                raise StoreError(f"the session store ({self._where}) is closed")
            if self._pool is None:
                # pool_size writer threads each hold at most one connection; two more
                # are for reads, so a busy writer never makes a read wait for one.
                pool: ConnectionPool[Conn] = ConnectionPool(
                    self._dsn, min_size=1, max_size=self.settings.pool_size + _READERS,
                    open=False, connection_class=self._connection_class(),
                    name=_POOL_NAME, timeout=self.settings.connect_timeout_s,
                    kwargs={"autocommit": True, "application_name": "lich",
                            "connect_timeout": max(1, round(self.settings.connect_timeout_s))})
                # Not waiting: an unreachable database is the first statement's error
                # (retried for reconnect_s), not a hang here.
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    def _connection_class(self) -> type[Conn]:
        """psycopg's connection class, noting each failed connection attempt of the
        pool (which retries in its own thread and would only make a checkout wait)."""
        store = self

        class _Connection(psycopg.Connection[Any]):
            @classmethod
            def connect(cls, *args: Any, **kwargs: Any) -> Any:
                try:
                    return super().connect(*args, **kwargs)
                except psycopg.OperationalError as exc:
                    store._connect_failure = exc
                    raise

        return _Connection

    def _checkout(self, pool: ConnectionPool[Conn]) -> Conn:
        """A connection from the pool. Before the database was ever reached, the pool's
        first failed attempt ends the wait (raised as it is), as does
        ``connect_timeout_s``."""
        if self._reached.is_set():
            return pool.getconn()
        self._connect_failure = None
        deadline = time.monotonic() + self.settings.connect_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                conn = pool.getconn(timeout=max(0.001, min(_FIRST_CONNECT_POLL_S, remaining)))
            except PoolTimeout:
                failure = self._connect_failure
                if failure is not None:
                    raise failure from None
                if remaining <= _FIRST_CONNECT_POLL_S:
                    raise PoolTimeout(f"no connection after {self.settings.connect_timeout_s:g} "
                                      "s (connect_timeout_s)") from None
                continue
            self._reached.set()
            return conn

    def _executor_for_writers(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise StoreError(f"the session store ({self._where}) is closed")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self.settings.pool_size, thread_name_prefix="lich-pg-writer")
            return self._executor

    def _redact(self, text: str) -> str:
        # libpq's messages name host, port and user, not the password; be sure anyway.
        try:
            password = psycopg.conninfo.conninfo_to_dict(self._dsn).get("password")
        except psycopg.ProgrammingError:
            password = None
        return text.replace(str(password), "***") if password else text

    def run(self, what: str, fn: Callable[[Conn, bool], T], *, migrated: bool = True) -> T:
        """``fn(connection, retried)`` on a pooled connection, the schema migrated first;
        retried on a new connection while the database is unreachable, up to
        ``reconnect_s``. ``migrated=False``: no migration first (``fn`` does it).

        :raises StoreUnavailable: it stayed unreachable.
        :raises StoreError: another database error (its message, never the DSN).
        """
        deadline = time.monotonic() + self.settings.reconnect_s
        delay = 0.05
        retried = False
        while True:
            pool = self._open_pool()
            reached = self._reached.is_set()
            try:
                with self._connection(pool) as conn:
                    if migrated and not self._migrated:
                        self._migrate(conn)
                    return fn(conn, retried)
            except psycopg.OperationalError as exc:
                # A broken connection, a restarting server, the pool's wait for one: all
                # worth another connection; the pool drops the broken one by itself.
                # Never reached: down or misconfigured, not restarting (see the module doc).
                if not reached or time.monotonic() + delay > deadline:
                    raise StoreUnavailable(
                        f"{what}: the session store ({self._where}) is unreachable: "
                        f"{self._redact(_first_line(exc))}") from None
                log.warning("%s: the session store is unreachable (%s); retrying",
                            what, self._redact(_first_line(exc)))
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                retried = True
            except psycopg.Error as exc:
                raise StoreError(f"{what}: {self._redact(_first_line(exc))}") from None

    @contextlib.contextmanager
    def _connection(self, pool: ConnectionPool[Conn]) -> Iterator[Conn]:
        """A pooled connection for one statement; inside :meth:`_holding`, the thread's
        held one (checked out once for a writer's whole queue: a checkout costs about
        as much as the statement). A broken connection goes back to the pool, which
        drops it."""
        local = self._local
        held: Conn | None = getattr(local, "conn", None)
        conn = held if held is not None else self._checkout(pool)
        if held is None and getattr(local, "holding", False):
            local.conn, local.pool = conn, pool
        try:
            yield conn
        finally:
            kept = getattr(local, "conn", None) is conn
            if kept and (conn.closed or conn.broken):
                local.conn = None
                kept = False
            if not kept:
                pool.putconn(conn)

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        """Statements of this thread inside the block share one pooled connection."""
        local = self._local
        local.holding = True
        try:
            yield
        finally:
            local.holding = False
            conn: Conn | None = getattr(local, "conn", None)
            local.conn = None
            if conn is not None:
                local.pool.putconn(conn)

    def _migrate(self, conn: Conn) -> None:
        before, after = migrate(conn)
        if before != after:
            log.info("session store schema migrated from version %d to %d", before, after)
        self._migrated = True

    def migrate(self) -> tuple[int, int]:
        """Run the migrations now; ``(version before, version after)`` (``lich store
        migrate``; every first use migrates too)."""
        versions = self.run("migrating the schema", lambda conn, _r: migrate(conn),
                            migrated=False)
        self._migrated = True
        return versions

    # ------------------------------------------------------------ SessionStore

    def prepare(self) -> None:
        """Reach the database and migrate the schema now (the gateway does at start)."""
        self.migrate()

    def new_id(self) -> str:
        """A new, time-sortable, unguessable session id (as the JSONL store makes)."""
        return JsonlSessionStore.new_id()

    def describe(self) -> str:
        """``postgres user@host:port/dbname``."""
        return self._where

    def location(self, session_id: str) -> str:
        """The database and the session's id."""
        return f"{self._where} session {session_id}"

    def exists(self, session_id: str) -> bool:
        """Whether the session has records."""
        if not is_valid_session_id(session_id):
            return False
        row = self.run("checking a session", lambda conn, _r: conn.execute(
            "SELECT next_seq > 1 FROM lich_sessions WHERE session_id = %s",
            (session_id,)).fetchone())
        return bool(row and row[0])

    def ids(self) -> builtins.list[str]:
        """Every session id with records, sorted."""
        rows = self.run("listing sessions", lambda conn, _r: conn.execute(
            "SELECT session_id FROM lich_sessions WHERE next_seq > 1 "
            "ORDER BY session_id").fetchall())
        return [r[0] for r in rows]

    def list(self) -> builtins.list[SessionInfo]:
        """Every session with records, newest first (one row each; no record is read)."""
        rows = self.run("listing sessions", lambda conn, _r: conn.execute(
            "SELECT session_id, coalesce(title, ''), modified, size, status, answered, "
            "CASE WHEN cost_unknown THEN NULL ELSE cost_usd END "
            "FROM lich_sessions WHERE next_seq > 1 "
            "ORDER BY modified DESC, session_id DESC").fetchall())
        return [SessionInfo(sid, None, title, modified, size, status, answered, cost,
                            location=self.location(sid))
                for sid, title, modified, size, status, answered, cost in rows]

    def resolve(self, ref: str) -> str:
        """An id, ``latest``, or the start of exactly one id."""
        if ref == "latest":
            row = self.run("finding the latest session", lambda conn, _r: conn.execute(
                "SELECT session_id FROM lich_sessions WHERE next_seq > 1 "
                "ORDER BY modified DESC, session_id DESC LIMIT 1").fetchone())
            if row is None:
                raise SessionNotFound(f"no sessions in {self._where}")
            return str(row[0])
        if self.exists(ref):
            return ref
        candidates: tuple[str, ...] = ()
        if ref:
            rows = self.run("finding a session", lambda conn, _r: conn.execute(
                "SELECT session_id FROM lich_sessions WHERE next_seq > 1 "
                "AND starts_with(session_id, %s) ORDER BY session_id", (ref,)).fetchall())
            candidates = tuple(r[0] for r in rows)
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            shown = ", ".join(candidates[:10]) + (", …" if len(candidates) > 10 else "")
            raise SessionAmbiguous(
                f"{ref!r} is the start of {len(candidates)} sessions in {self._where}: "
                f"{shown}; give more of the id", candidates)
        raise SessionNotFound(f"no session {ref!r} in {self._where}")

    def read(self, ref: str) -> SessionContents:
        """Every record in seq order; one that does not parse is reported by its seq
        and skipped, as a corrupt line of a file is."""
        sid = self.resolve(ref)
        rows = self.run("reading a session", lambda conn, _r: conn.execute(
            "SELECT seq, record FROM lich_records WHERE session_id = %s ORDER BY seq",
            (sid,)).fetchall())
        records: list[dict[str, Any]] = []
        messages: list[Message] = []
        problems: list[str] = []
        for seq, text in rows:
            try:
                record = json.loads(text)
                messages = apply_record(record, messages)
            except (ValueError, serialization.SerializationError) as exc:
                problems.append(f"record {seq}: corrupt record skipped: {exc}")
                continue
            records.append(record)
        return SessionContents(session_id=sid, path=None, records=tuple(records),
                               messages=tuple(messages), problems=tuple(problems),
                               location=self.location(sid),
                               end=int(rows[-1][0]) if rows else 0)

    def history(self, ref: str) -> builtins.list[Message]:
        """The conversation to resume: messages, with dangling tool calls closed."""
        return repair_dangling_tool_calls(self.read(ref).messages)

    def open(self, session_id: str | None = None) -> PostgresWriter:
        """A writer for one run; it claims the session before its first record."""
        sid = session_id or self.new_id()
        if not is_valid_session_id(sid):
            raise ValueError(f"invalid session id: {sid!r}")
        return PostgresWriter(self, sid)

    def remove(self, session_id: str) -> None:
        """Delete the session and its records (a writer of it then finds itself stale)."""
        if not is_valid_session_id(session_id):
            raise ValueError(f"invalid session id: {session_id!r}")
        deleted = self.run("removing a session", lambda conn, _r: conn.execute(
            "DELETE FROM lich_sessions WHERE session_id = %s", (session_id,)).rowcount)
        if not deleted:
            raise SessionNotFound(f"no session {session_id!r} in {self._where}")

    def close(self) -> None:
        """Wait for every writer's queued records (each bounded by ``reconnect_s``),
        then close the threads and the pool. Idempotent; a writer appending after it
        gets a :class:`~lich.sessions.StoreError`."""
        with self._lock:
            executor = self._executor
        if executor is not None:
            # Queued drains still run (and use the pool); new ones are refused.
            executor.shutdown(wait=True)
        with self._lock:
            self._closed = True
            self._executor = None
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


class PostgresWriter:
    """Appends one run's records to one session, in order, off the caller's thread.

    ``append`` raises the writer's failure once there is one (a
    :class:`~lich.sessions.StaleWriter`, a :class:`StoreUnavailable`); so do
    :meth:`flush`, :meth:`close` and :meth:`aclose`. After a failure nothing
    more is written.
    """

    def __init__(self, store: PostgresStore, session_id: str) -> None:
        self.session_id = session_id
        self._store = store
        self._lock = threading.Lock()
        self._ops: deque[_Op] = deque()
        self._scheduled = False
        self._error: StoreError | None = None
        #: The epoch this writer claimed (``None`` before its claim).
        self.epoch: int | None = None
        self._seq: int | None = None
        #: The ``next_seq`` its claim requires (:meth:`claim_after`); ``None``: any.
        self._claim_next: int | None = None

    @property
    def location(self) -> str:
        """The database and the session's id."""
        return self._store.location(self.session_id)

    # ------------------------------------------------------------ the caller's side

    def append(self, kind: str, **fields: Any) -> None:
        """Queue one record (encoded here, stored by the writer's task)."""
        if self._error is not None:
            raise self._error
        ts = time.time()
        line = encode_record({"v": RECORD_VERSION, "ts": ts, "kind": kind, **fields})
        params = {"ts": ts, "kind": kind, "size": len(line),
                  "record": line[:-1].decode("utf-8"), **_summary(kind, fields)}
        self._submit(_Op("record", params))

    def message(self, message: Message) -> None:
        """Queue one message."""
        self.append("message", message=serialization.message_to_dict(message))

    def compact(self, messages: Iterable[Message]) -> None:
        """Queue the history as compression left it."""
        self.append("compact", messages=[serialization.message_to_dict(m) for m in messages])

    def _barrier(self, what: str) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self._error is not None:
            future.set_exception(self._error)
            return future
        self._submit(_Op(what, None, future))
        return future

    def claim_after(self, end: int) -> None:
        """Claim the session only if its last record is still the one at ``end``
        (0: none); else fail with :class:`~lich.sessions.StaleWriter`
        (:class:`lich.sessions.ConditionalWriter`)."""
        if self.epoch is not None:
            raise RuntimeError("claim_after() after the writer's claim")
        self._claim_next = end + 1

    def claim(self) -> int:
        """Claim the session now (the first record would otherwise); the epoch."""
        return int(self._barrier("claim").result())

    def flush(self) -> None:
        """Return once every queued record is stored; raise the writer's failure."""
        self._barrier("flush").result()

    def close(self) -> None:
        """:meth:`flush` (the writer stays usable: a later append goes on)."""
        self.flush()

    async def aclose(self) -> None:
        """:meth:`close`, awaited on the event loop instead of blocking it."""
        await asyncio.wrap_future(self._barrier("flush"))

    def _submit(self, op: _Op) -> None:
        with self._lock:
            self._ops.append(op)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._store._executor_for_writers().submit(self._drain)
        except (StoreError, RuntimeError) as exc:
            # The store was closed: fail what is queued rather than leave it waiting.
            self._fail(exc if isinstance(exc, StoreError) else StoreError(str(exc)))
            with self._lock:
                self._scheduled = False
            raise self._error from None  # type: ignore[misc]

    # ------------------------------------------------------------ the writer's task

    def _drain(self) -> None:
        with self._store._holding():
            self._drain_held()

    def _drain_held(self) -> None:
        while True:
            with self._lock:
                if not self._ops:
                    self._scheduled = False
                    return
                op = self._ops.popleft()
            if self._error is not None:
                if op.future is not None:
                    op.future.set_exception(self._error)
                continue
            try:
                result = self._do(op)
            except StoreError as exc:
                self._fail(exc)
                if op.future is not None:
                    op.future.set_exception(exc)
                continue
            except Exception as exc:  # a bug must not leave flush() waiting forever
                log.error("session %s: writing failed", self.session_id, exc_info=True)
                error = StoreError(f"session {self.session_id}: writing failed: {exc!r}")
                self._fail(error)
                if op.future is not None:
                    op.future.set_exception(error)
                continue
            if op.future is not None:
                op.future.set_result(result)

    def _fail(self, error: StoreError) -> None:
        if self._error is None:
            self._error = error
            log.error("%s; nothing more is written by this writer", error)

    def _do(self, op: _Op) -> int | None:
        if op.what == "flush":
            return None
        if self.epoch is None:
            self._claim()
        if op.what == "claim":
            return self.epoch
        assert op.params is not None
        self._append(op.params)
        return None

    def _claim(self) -> None:
        expected = self._claim_next
        params = {"sid": self.session_id, "now": time.time(), "next": expected}
        row = self._store.run(f"claiming session {self.session_id}", lambda conn, _r: conn.execute(
            _CLAIM if expected is None else _CLAIM_EMPTY if expected == 1 else _CLAIM_AT,
            params).fetchone())
        if row is None:
            raise StaleWriter(
                f"session {self.session_id} changed since it was read (another writer "
                f"added to it after record {(expected or 1) - 1}); this writer stops",
                session_id=self.session_id)
        self.epoch, self._seq = int(row[0]), int(row[1])

    def _append(self, params: dict[str, Any]) -> None:
        assert self.epoch is not None
        assert self._seq is not None
        args = {**params, "sid": self.session_id, "epoch": self.epoch, "seq": self._seq}

        def write(conn: Conn, retried: bool) -> None:
            if conn.execute(_APPEND, args).rowcount == 1:
                return
            row = conn.execute("SELECT epoch, next_seq FROM lich_sessions WHERE session_id = %s",
                               (self.session_id,)).fetchone()
            if retried and row is not None and row[0] == self.epoch:
                # The connection broke after this very append committed: its row is there.
                mine = conn.execute(
                    "SELECT 1 FROM lich_records WHERE session_id = %s AND seq = %s "
                    "AND epoch = %s", (self.session_id, args["seq"], self.epoch)).fetchone()
                if mine is not None:
                    return
            raise self._stale(row, args["seq"])

        self._store.run(f"appending to session {self.session_id}", write)
        self._seq += 1

    def _stale(self, row: tuple[Any, ...] | None, seq: int) -> StaleWriter:
        sid = self.session_id
        if row is None:
            return StaleWriter(f"session {sid} was removed while this writer had it; "
                               "this writer stops", session_id=sid, epoch=self.epoch, seq=seq)
        current, next_seq = int(row[0]), int(row[1])
        if current != self.epoch:
            return StaleWriter(
                f"session {sid} was claimed by another writer (epoch {current}; this "
                f"writer's is {self.epoch}); this writer stops", session_id=sid,
                epoch=self.epoch, current_epoch=current, seq=seq)
        return StaleWriter(
            f"session {sid}: record {seq} was already written by another writer of epoch "
            f"{current} (the next free seq is {next_seq}); this writer stops",
            session_id=sid, epoch=self.epoch, current_epoch=current, seq=seq)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
