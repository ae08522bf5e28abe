"""The task store: SQLAlchemy Core on SQLite (embedded, WAL) or Postgres (psycopg 3).

This package is the only code that speaks SQL. Its functions take a ``Connection`` from
:meth:`Store.transaction` or :meth:`Store.snapshot` so that a caller composes several writes
into one atomic unit; none of them commits on its own.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from surehand.errors import SchemaNotReady
from surehand.model import Receipt
from surehand.store import counters, creation, migrate, receipts
from surehand.store.engine import (
    DEFAULT_POOL_SIZE,
    DEFAULT_POOL_TIMEOUT,
    make_autocommit_engine,
    make_engine,
)
from surehand.store.shared_engines import EngineLeases
from surehand.store.transactions import one_statement, snapshot, transaction

if TYPE_CHECKING:
    from surehand.config import Settings

__all__ = ["Store"]


SECRET_WORDS = ("pass", "secret", "token", "key", "credential", "auth")


def describe_url(url: str) -> str:
    """``url`` with its password and every secret-looking query parameter shown as ``hidden``."""
    parsed = make_url(url)
    hidden = {
        name: "hidden"
        for name in parsed.query
        if any(word in name.lower() for word in SECRET_WORDS)
    }
    return parsed.update_query_dict(hidden).render_as_string(hide_password=True)


class Store:
    """A handle on one database: transactions, snapshots and migrations.

    Stores on one URL in one process share their engines (and so their pools); :meth:`dispose`
    gives this store's share back, and so does dropping the store without it."""

    def __init__(
        self,
        url: str,
        *,
        auto_upgrade: bool | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> None:
        """``pool_size``: connections each of the store's three engines opens at most on
        Postgres; ``pool_timeout``: how long a caller beyond them waits for one (see
        ``Settings.database_pool_size`` and ``database_pool_timeout_seconds``)."""
        self.url = url
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self._leases = EngineLeases()
        # No reference to self in the finalizer: it runs when the store is garbage collected.
        self._finalizer = weakref.finalize(self, self._leases.release_all)
        self.engine: Engine = self._shared(
            "engine", lambda: make_engine(url, pool_size=pool_size, pool_timeout=pool_timeout)
        )
        is_sqlite = self.engine.dialect.name == "sqlite"
        # The embedded SQLite file migrates itself on first use; a shared Postgres is migrated
        # deliberately with `surehand db upgrade` (and checked here).
        self._auto_upgrade = is_sqlite if auto_upgrade is None else auto_upgrade
        self._ready = False
        self._schema_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        """The store ``settings`` name, with its pool size and pool timeout."""
        return cls(
            settings.resolved_database_url(),
            pool_size=settings.database_pool_size,
            pool_timeout=settings.database_pool_timeout_seconds,
        )

    def _shared(self, role: str, make: Callable[[], Engine]) -> Engine:
        key: Hashable = (role, self.url, self.pool_size, self.pool_timeout)
        if ":memory:" in self.url:
            key = (key, id(self))  # an in-memory database is private to its store
        return self._leases.acquire(key, make)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def describe(self) -> str:
        """The URL with any secret hidden, for logs and `surehand check`: the password, and
        every query parameter that can carry one (``?password=``, ``sslpassword``, ...)."""
        return describe_url(self.url)

    def ensure_schema(self) -> None:
        """Upgrade (embedded) or verify (deployment) the schema once per process."""
        if self._ready:
            return
        with self._schema_lock:  # alembic's module state is not thread-safe
            if not self._ready:
                self._check_schema()

    def _check_schema(self) -> None:
        # One SELECT when the schema is current: alembic is imported only to apply something.
        if not migrate.is_current(self.engine):
            if not self._auto_upgrade:
                raise SchemaNotReady(
                    f"the database at {self.describe()} is not at migration "
                    f"{migrate.head_revision()}: run `surehand db upgrade`"
                )
            migrate.upgrade(self.engine)
        self._ready = True

    def upgrade(self) -> str:
        revision = migrate.upgrade(self.engine)
        self._ready = True
        return revision

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction: commit on success, roll back and translate errors on failure."""
        self.ensure_schema()
        with transaction(self.engine) as connection:
            yield connection

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A read-only transaction."""
        self.ensure_schema()
        with snapshot(self.engine) as connection:
            yield connection

    @contextmanager
    def single_read(self) -> Iterator[Connection]:
        """For exactly one read statement (autocommit; no transaction round trips)."""
        self.ensure_schema()
        with one_statement(self.one_statement_engine) as connection:
            yield connection

    @contextmanager
    def one_write(self) -> Iterator[Connection]:
        """For a write that is ONE statement on Postgres (run in autocommit: no BEGIN/COMMIT
        round trips) and a transaction on SQLite (whose statements run in-process)."""
        self.ensure_schema()
        if self.dialect == "postgresql":
            with one_statement(self.one_statement_engine) as connection:
                yield connection
        else:
            with transaction(self.engine) as connection:
                yield connection

    def allocate_ahead(self, kind: str, day: str) -> tuple[int, int] | None:
        """On Postgres, allocate a number in a short transaction of its own (``(counter value,
        number shown)``, as ``counters.allocate``); on SQLite, None.

        Postgres creators would otherwise queue on the counter row for the whole of their
        creating transaction. The allocation commits without waiting for the WAL flush: that
        is safe because any later commit that uses the number flushes the WAL up to and past
        it, so a number is never reused once anything durable holds it (it may be skipped when
        the creating transaction rolls back). SQLite serialises writers anyway, so it
        allocates inside the creating transaction and leaves no gaps.
        """
        if self.dialect != "postgresql":
            return None
        self.ensure_schema()
        with one_statement(self._async_commit_engine) as connection:
            return counters.allocate(connection, kind, day)

    def receipt_or_number(
        self, tenant: str, submission_id: str, day: str
    ) -> tuple[Receipt | None, int | None]:
        """The submission's receipt, or None and -- on Postgres -- the next TASK number of
        ``day``, allocated ahead (as :meth:`allocate_ahead`) by the same statement: a create
        costs one round trip less. On SQLite the number is None (allocated by the create)."""
        self.ensure_schema()
        if self.dialect != "postgresql":
            with self.single_read() as connection:
                return receipts.get(connection, tenant, submission_id), None
        with one_statement(self._async_commit_engine) as connection:
            row, number = creation.receipt_or_number(
                connection, tenant=tenant, submission_id=submission_id, kind="TASK", day=day
            )
        return (receipts.from_row(row) if row is not None else None), number

    @cached_property
    def one_statement_engine(self) -> Engine:
        """Postgres: an engine whose connections stay in autocommit; SQLite: the store's."""
        if self.dialect != "postgresql":
            return self.engine
        return self._shared(
            "autocommit",
            lambda: make_autocommit_engine(
                self.engine, pool_size=self.pool_size, pool_timeout=self.pool_timeout
            ),
        )

    @cached_property
    def _async_commit_engine(self) -> Engine:
        return self._shared(
            "async_commit",
            lambda: make_autocommit_engine(
                self.engine,
                pool_size=self.pool_size,
                pool_timeout=self.pool_timeout,
                synchronous_commit=False,
            ),
        )

    def dispose(self) -> None:
        """Give back this store's share of its engines: the last store on the URL closes the
        pooled connections. The store stays usable (its engines reconnect on demand)."""
        self._leases.release_all()
