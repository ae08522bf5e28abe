"""Transaction scopes on an engine (a write transaction, one autocommit statement, a
read-only snapshot) and the translation of driver errors into ``surehand.errors`` types, at
the store boundary: callers above the store never see SQLAlchemy or DBAPI exceptions."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, exc

from surehand.errors import (
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
from surehand.store.engine import NO_BEGIN_OPTION, READ_OPTION

_SQLITE_TABLE = re.compile(r"(?:UNIQUE|PRIMARY KEY) constraint failed: (\w+)\.")


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
                yield connection.execution_options(**{NO_BEGIN_OPTION: True})
            else:
                yield connection
    except (exc.DBAPIError, exc.SQLAlchemyError) as error:
        raise translate(error) from error


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction (never takes SQLite's write lock)."""
    try:
        with engine.connect() as connection:
            connection = connection.execution_options(**{READ_OPTION: True})
            with connection.begin():
                yield connection
    except (exc.DBAPIError, exc.SQLAlchemyError) as error:
        raise translate(error) from error
