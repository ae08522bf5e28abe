"""Engines for SQLite (embedded, WAL) and Postgres (psycopg 3): the database URL parsed and
checked, the pools sized, and each dialect set up for surehand's access pattern. Sharing them
in a process: :mod:`.shared_engines`; transactions and driver errors: :mod:`.transactions`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import URL, make_url

from surehand.errors import BadDatabaseUrl
from surehand.store.shared_engines import forget_at_fork

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
# Execution options our SQLite "begin" hook reads (:mod:`.transactions` sets them).
READ_OPTION = "surehand_read_only"
NO_BEGIN_OPTION = "surehand_one_statement"


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
        return forget_at_fork(_sqlite_engine(url, pool_size))
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
    return forget_at_fork(engine)


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
    return forget_at_fork(
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
        if connection.get_execution_options().get(NO_BEGIN_OPTION, False):
            return
        read_only = connection.get_execution_options().get(READ_OPTION, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value
