"""Counting what a store does per operation, for the benchmarks' profile passes.

Statements are counted whether they run through SQLAlchemy or on the driver's cursor
(``DriverStatement``), on every engine of the store: the main one (transactions), the
autocommit one (Postgres one-statement writes and single reads, each its own durable commit)
and the asynchronous-commit one (numbers allocated ahead, not waited for; write_task's first
read, which allocates the TASK number when it finds no receipt).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event

from surehand.store import Store
from surehand.store.driver import DriverStatement

AUTOCOMMIT = "autocommit statement"
# A write there commits without waiting for the WAL flush; a read there (write_task's first
# statement finding a receipt) commits nothing, but is counted here all the same.
ASYNC_COMMIT = "statement on the async-commit engine"
COMMIT = "transaction commit"


@dataclass
class StoreCounts:
    statements: Counter[str] = field(default_factory=Counter)  # by first SQL word
    durable: Counter[str] = field(default_factory=Counter)  # COMMIT / AUTOCOMMIT / ASYNC_COMMIT
    rollbacks: int = 0
    checkouts: int = 0


@contextmanager
def counted(store: Store) -> Iterator[StoreCounts]:
    """Count the store's statements, commits, rollbacks and pool checkouts while the block runs."""
    counts = StoreCounts()
    engine = store.engine
    autocommit = store.one_statement_engine if store.dialect == "postgresql" else None
    asynchronous = store._async_commit_engine if store.dialect == "postgresql" else None
    engines = [e for e in (engine, autocommit, asynchronous) if e is not None]

    def seen(connection: Any, sql: str) -> None:
        verb = sql.lstrip().split(None, 1)[0].upper()
        counts.statements[verb] += 1
        if connection.engine is autocommit and verb != "SELECT":  # a single read commits nothing
            counts.durable[AUTOCOMMIT] += 1
        elif connection.engine is asynchronous:
            counts.durable[ASYNC_COMMIT] += 1

    def on_execute(connection: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        seen(connection, sql)

    def on_commit(_connection: Any) -> None:
        counts.durable[COMMIT] += 1

    def on_rollback(_connection: Any) -> None:
        counts.rollbacks += 1

    def on_checkout(*_args: Any) -> None:
        counts.checkouts += 1

    execute = DriverStatement._execute

    def driver_execute(self: DriverStatement, connection: Any, compiled: Any, *args: Any) -> Any:
        seen(connection, compiled.sql)
        return execute(self, connection, compiled, *args)

    hooks: list[tuple[Any, str, Callable[..., None]]] = [(engine, "commit", on_commit)]
    hooks += [(engine, "rollback", on_rollback)]
    for each in engines:
        hooks += [(each, "before_cursor_execute", on_execute), (each.pool, "checkout", on_checkout)]
    for target, name, hook in hooks:
        event.listen(target, name, hook)
    DriverStatement._execute = driver_execute  # type: ignore[method-assign,assignment]
    try:
        yield counts
    finally:
        DriverStatement._execute = execute  # type: ignore[method-assign]
        for target, name, hook in hooks:
            event.remove(target, name, hook)
