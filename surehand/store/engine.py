"""Engines and transactions for SQLite (embedded, WAL) and Postgres (psycopg 3).

Driver errors are translated here, at the store boundary, into ``surehand.errors`` types:
callers above the store never see SQLAlchemy or DBAPI exceptions.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url

from surehand.errors import (
    BadDatabaseUrl,
    Conflict,
    DatabaseAuthFailed,
    DatabaseBusy,
    DatabaseMissing,
    DatabaseUnreachable,
    DuplicateKey,
    SchemaNotReady,
    StoreError,
    StoreUnavailable,
    SurehandError,
)

SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_LOCK_TIMEOUT = "15s"
# A partition (or a database host that went away) leaves connections half-open: a statement
# sent on one waits out the kernel's retransmissions (~15 min) while the session's lease, kept
# in Redis, stays alive and its TASK sits in active. Keepalives find an idle dead connection,
# tcp_user_timeout one with unacknowledged data; either fails as StoreUnavailable (retryable).
PG_TCP_ARGS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # ms
}
DEFAULT_POOL_SIZE = 10  # Settings.database_pool_size
DEFAULT_POOL_TIMEOUT = 30.0  # Settings.database_pool_timeout_seconds
# Postgres: no overflow. Each connection is a server process counted against max_connections,
# and a burst of callers (a thousand sessions settling at once) must wait for the pool's
# connections, not open one each: a process holds at most 3 x pool_size (three engines).
PG_MAX_OVERFLOW = 0
# SQLite's connections are in-process (no server limit): a caller beyond the pool opens one of
# its own rather than wait, as when the worker sized the pool to its concurrency.
SQLITE_MAX_OVERFLOW = -1
_SQLITE_TABLE = re.compile(r"(?:UNIQUE|PRIMARY KEY) constraint failed: (\w+)\.")
_READ_OPTION = "surehand_read_only"
_NO_BEGIN_OPTION = "surehand_one_statement"


def make_engine(
    url: str, *, pool_size: int = DEFAULT_POOL_SIZE, pool_timeout: float = DEFAULT_POOL_TIMEOUT
) -> Engine:
    """Create an engine for a SQLite or Postgres URL, configured for surehand's access pattern.

    Postgres: the pool opens at most ``pool_size`` connections, as needed; a caller beyond them
    waits up to ``pool_timeout`` seconds for one to be returned, then gets StoreUnavailable
    (the pool is exhausted). SQLite: ``pool_size`` are kept, and a caller beyond them opens a
    connection of its own (in-process, closed when returned) instead of waiting.

    Nothing is opened or created here: a SQLite file (and its directory) is created by the
    first connection, so a handle that is never used leaves no trace on disk."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _forget_at_fork(_sqlite_engine(url, pool_size))
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    # No pre-ping: it costs a round trip on every checkout. A connection that a database
    # restart killed fails its first statement, SQLAlchemy invalidates the pool, and the
    # caller gets StoreUnavailable; the session claim retries once on a fresh connection.
    try:
        engine = create_engine(
            parsed,
            pool_pre_ping=False,
            pool_size=pool_size,
            max_overflow=PG_MAX_OVERFLOW,
            pool_timeout=pool_timeout,
            connect_args={"options": f"-c lock_timeout={PG_LOCK_TIMEOUT}", **PG_TCP_ARGS},
        )
    except (exc.NoSuchModuleError, ImportError) as error:
        raise BadDatabaseUrl(
            f"SUREHAND_DATABASE_URL uses the driver {parsed.drivername!r}, which is not "
            "installed: write postgresql+psycopg://user:password@host:5432/dbname (pip install "
            "'surehand[postgres]')",
            setting="SUREHAND_DATABASE_URL",
        ) from error
    return _forget_at_fork(engine)


_URL_FORMS = (
    "write sqlite:///relative/file.sqlite3, sqlite:////absolute/file.sqlite3 or "
    "postgresql+psycopg://user:password@host:5432/dbname"
)


def parse_url(url: str) -> URL:
    """``url`` parsed, if surehand supports it (SQLite or Postgres); BadDatabaseUrl naming
    SUREHAND_DATABASE_URL and the forms to write otherwise. The message never shows a
    password: only the part after the last ``@`` of a URL that did not parse."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError as error:
        shown = url.rpartition("@")[2]
        plain = "://" not in url and "@" not in url
        hint = f" (for a SQLite file: sqlite:///{shown})" if plain else ""
        raise BadDatabaseUrl(
            f"SUREHAND_DATABASE_URL {shown!r} is not a database URL{hint}: {_URL_FORMS}",
            setting="SUREHAND_DATABASE_URL",
        ) from error
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        hint = " (postgres:// is spelled postgresql+psycopg:// here)" * (
            parsed.drivername == "postgres"
        )
        raise BadDatabaseUrl(
            f"unsupported database URL scheme {parsed.drivername!r} in SUREHAND_DATABASE_URL"
            f"{hint} (surehand speaks SQLite and Postgres): {_URL_FORMS}",
            setting="SUREHAND_DATABASE_URL",
        )
    return parsed


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (relative to the current directory, as SQLite opens it);
    None for Postgres and in-memory databases."""
    parsed = parse_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):
        return None  # a SQLite URI filename: its options say what opening it does
    return Path(database)


def make_autocommit_engine(
    engine: Engine,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    synchronous_commit: bool = True,
) -> Engine:
    """A Postgres engine whose connections stay in autocommit, for writes that are ONE
    statement (atomic by itself: no BEGIN/COMMIT round trips) and single reads.

    Its connections never hold a transaction, so the pool neither switches their isolation
    level per checkout nor rolls them back on return. ``synchronous_commit=False``: commits do
    not wait for the WAL flush -- only for writes that a later synchronous commit makes durable
    anyway (see ``Store.allocate_ahead``). Its pool is bounded as ``make_engine``'s."""
    options = f"-c lock_timeout={PG_LOCK_TIMEOUT}"
    if not synchronous_commit:
        options += " -c synchronous_commit=off"
    return _forget_at_fork(
        create_engine(
            engine.url,
            pool_size=pool_size,
            max_overflow=PG_MAX_OVERFLOW,
            pool_timeout=pool_timeout,
            isolation_level="AUTOCOMMIT",
            pool_reset_on_return=None,
            connect_args={"options": options, **PG_TCP_ARGS},
        )
    )


# Every engine made here, held weakly: the fork hook must not keep an engine (and its pooled
# connections) alive after its last user dropped it.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()


def _forget_at_fork(engine: Engine) -> Engine:
    _ENGINES.add(engine)
    return engine


def _drop_pools_in_child() -> None:
    # A forked child (prefork workers) must not reuse the parent's connections: it drops the
    # pools without closing them (they are the parent's to close).
    global _SHARED_LOCK
    _SHARED_LOCK = threading.RLock()  # a thread of the parent may have held it at the fork
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_drop_pools_in_child)


@dataclass
class _Shared:
    engine: Engine
    users: int


# The process-wide engines, by URL, role and pool settings, with the number of their users:
# many handles on one database in one process share one set of pools.
_SHARED: dict[Hashable, _Shared] = {}
# Reentrant: making an engine allocates, the garbage collector may then run the finalizer of a
# dropped handle in this very thread, and that finalizer releases its engines here.
_SHARED_LOCK = threading.RLock()


def acquire_engine(key: Hashable, make: Callable[[], Engine]) -> Engine:
    """The shared engine for ``key`` (made by ``make`` on first use); one more user of it.
    Every acquire needs one :func:`release_engine`."""
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is None:
            shared = _SHARED[key] = _Shared(make(), 0)
        shared.users += 1
        return shared.engine


def release_engine(key: Hashable) -> None:
    """One user fewer; the last one closes the engine's pooled connections."""
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is None:
            return
        shared.users -= 1
        if shared.users > 0:
            return
        del _SHARED[key]
    shared.engine.dispose()


class EngineLeases:
    """The shared engines one handle uses; :meth:`release_all` gives them all back (called by
    the handle's close and, for a handle dropped without it, by its finalizer)."""

    def __init__(self) -> None:
        self._keys: list[Hashable] = []
        self._lock = threading.Lock()

    def acquire(self, key: Hashable, make: Callable[[], Engine]) -> Engine:
        engine = acquire_engine(key, make)
        with self._lock:
            self._keys.append(key)
        return engine

    def release_all(self) -> None:
        with self._lock:
            keys, self._keys = self._keys, []
        for key in keys:
            release_engine(key)


def _sqlite_engine(url: str, pool_size: int) -> Engine:
    path = sqlite_file(url)
    engine = create_engine(
        url, pool_size=pool_size, max_overflow=SQLITE_MAX_OVERFLOW, connect_args={"timeout": 30}
    )

    @event.listens_for(engine, "do_connect")
    def _make_directory(*_args: Any) -> None:
        # At the first connection, not when the engine is made: opening a handle that only
        # reads (or is never used) must not create directories.
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control so that writers can BEGIN IMMEDIATE: a deferred
        # transaction that upgrades to a write lock fails with SQLITE_BUSY without waiting.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()
        # SQLite's own lower() folds ASCII only; Postgres (UTF-8) folds every letter. The
        # console's case-insensitive search must answer the same on both.
        dbapi_connection.create_function("lower", 1, _lower, deterministic=True)

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        if connection.get_execution_options().get(_NO_BEGIN_OPTION, False):
            return
        read_only = connection.get_execution_options().get(_READ_OPTION, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def translate(error: exc.DBAPIError | exc.SQLAlchemyError) -> SurehandError:
    """Map a driver error to the surehand error a caller can act on."""
    if isinstance(error, exc.IntegrityError):
        return DuplicateKey(_table_of(error), "a row with this key already exists")
    if isinstance(error, exc.TimeoutError):
        return _pool_exhausted(error)
    original = str(getattr(error, "orig", error))
    # Only a driver's own error says why a connection was refused (a pool timeout does not).
    cause = _connection_cause(original) if isinstance(error, exc.DBAPIError) else None
    if cause is not None:
        return cause
    text = original.lower()
    if "no such table" in text or ("does not exist" in text and "relation" in text):
        return SchemaNotReady("the database schema is missing: run `surehand db upgrade`")
    if "deadlock" in text or "could not serialize" in text:
        return Conflict("a concurrent transaction won; retry the call")
    if isinstance(error, exc.OperationalError | exc.InterfaceError) or (
        isinstance(error, exc.DBAPIError) and error.connection_invalidated
    ):
        # Not "nothing was written": a connection killed after COMMIT was sent loses only the
        # reply, and the transaction stands (issue 10).
        return StoreUnavailable(
            "the database is unreachable or busy "
            f"({type(getattr(error, 'orig', error)).__name__}); the transaction was rolled "
            "back unless only the reply to its commit was lost. Retry later: surehand's own "
            "writes are safe to repeat"
        )
    return StoreError(f"database error: {type(getattr(error, 'orig', error)).__name__}")


def _pool_exhausted(error: exc.TimeoutError) -> StoreUnavailable:
    # The pool's own timeout: every connection this process may open was in use for the
    # whole wait. Nothing reached the database, and it may be perfectly reachable.
    detail = str(error).partition(" (Background on this error")[0]
    return StoreUnavailable(
        f"the database pool is exhausted: every connection this process may open stayed in "
        f"use while this call waited ({detail}); nothing was sent. Retry later: surehand's own "
        "writes are safe to repeat. If it recurs, raise SUREHAND_DATABASE_POOL_SIZE (within "
        "Postgres' max_connections: compose/DEPLOYMENT.md, Database connections) or "
        "SUREHAND_DATABASE_POOL_TIMEOUT_SECONDS"
    )


_MISSING_DATABASE = re.compile(r'database "([^"]+)" does not exist', re.IGNORECASE)
_AUTH_FAILED = (
    "password authentication failed",
    "no password supplied",
    "peer authentication failed",
    "no pg_hba.conf entry",
    "authentication failed",
)
_ROLE_MISSING = re.compile(r'role "[^"]+" does not exist', re.IGNORECASE)
_TOO_MANY = ("too many clients", "too many connections", "remaining connection slots")
_UNREACHABLE = (
    "connection refused",
    "could not translate host name",
    "name or service not known",
    "nodename nor servname",
    "no route to host",
    "network is unreachable",
    "timeout expired",
    "connection timed out",
)


def _connection_cause(original: str) -> SurehandError | None:
    """A typed error naming why a connection was refused (missing database, login, too many
    connections, unreachable host) and the fix; None when the message is none of those."""
    text = original.lower()
    missing = _MISSING_DATABASE.search(original)
    if missing:
        name = missing.group(1)
        return DatabaseMissing(
            f'the database server answers, but database "{name}" does not exist: create it '
            f"(`createdb {name}`, or CREATE DATABASE) or fix the name in "
            "SUREHAND_DATABASE_URL, then run `surehand db upgrade`",
            setting="SUREHAND_DATABASE_URL",
        )
    if any(phrase in text for phrase in _AUTH_FAILED) or _ROLE_MISSING.search(original):
        return DatabaseAuthFailed(
            f"the database refused the login ({_reason(original)}): fix the user and password "
            "in SUREHAND_DATABASE_URL, or the server's pg_hba.conf",
            setting="SUREHAND_DATABASE_URL",
        )
    if any(phrase in text for phrase in _TOO_MANY):
        return DatabaseBusy(
            f"the database has no free connection slot ({_reason(original)}): retry later; "
            "lower SUREHAND_DATABASE_POOL_SIZE or the number of processes, or raise Postgres' "
            "max_connections (see compose/DEPLOYMENT.md, Database connections)"
        )
    if any(phrase in text for phrase in _UNREACHABLE):
        return DatabaseUnreachable(
            f"cannot reach the database server ({_reason(original)}): check the host and port "
            "in SUREHAND_DATABASE_URL and that the server runs; retry when it answers",
            setting="SUREHAND_DATABASE_URL",
        )
    return None


def _reason(original: str) -> str:
    """The server's own words (after the last ``FATAL:`` or ``failed:``), one line, short."""
    lines = original.strip().splitlines() or [original]
    line = next((item for item in lines if "FATAL:" in item), lines[0])
    for marker in ("FATAL:", "failed:"):
        if marker in line:
            line = line.rpartition(marker)[2]
            break
    return line.strip()[:200]


def _table_of(error: exc.IntegrityError) -> str:
    diag = getattr(getattr(error, "orig", None), "diag", None)
    if diag is not None and getattr(diag, "table_name", None):
        return str(diag.table_name)
    match = _SQLITE_TABLE.search(str(error.orig))
    return match.group(1) if match else "unknown"


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One write transaction; commits on success, rolls back and translates on error."""
    try:
        with engine.begin() as connection:
            yield connection
    except (exc.DBAPIError, exc.SQLAlchemyError) as error:
        raise translate(error) from error


@contextmanager
def one_statement(engine: Engine) -> Iterator[Connection]:
    """A connection for ONE statement, run in autocommit: a single statement is atomic by
    itself, and skipping BEGIN/COMMIT saves two round trips on hot paths. ``engine`` is an
    autocommit engine on Postgres (``make_autocommit_engine``), the store's engine on SQLite."""
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                # The driver already runs statements in autocommit (we issue BEGIN ourselves):
                # skip the BEGIN instead of switching isolation levels back and forth.
                yield connection.execution_options(**{_NO_BEGIN_OPTION: True})
            else:
                yield connection
    except (exc.DBAPIError, exc.SQLAlchemyError) as error:
        raise translate(error) from error


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction (never takes SQLite's write lock)."""
    try:
        with engine.connect() as connection:
            connection = connection.execution_options(**{_READ_OPTION: True})
            with connection.begin():
                yield connection
    except (exc.DBAPIError, exc.SQLAlchemyError) as error:
        raise translate(error) from error
