"""Watch a store's connection pools: how many connections are checked out at once, and any
thread that asks for a connection while it holds one (the wait that can deadlock a bounded
pool: every connection held by a thread waiting for another)."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, event

from surehand.store import Store


def store_engines(store: Store) -> list[Engine]:
    """The store's engines: one on SQLite, three on Postgres."""
    if store.dialect != "postgresql":
        return [store.engine]
    return [store.engine, store.one_statement_engine, store._async_commit_engine]


@dataclass
class PoolWatch:
    """What the watched pools saw while :func:`watch_pools` ran."""

    peak: int = 0  # connections checked out at once, over every watched pool
    opened: int = 0  # new database connections made
    nested: list[str] = field(default_factory=list)  # where a holder asked for another
    _out: int = 0
    _held: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def checkout(self, *_args: Any) -> None:
        held = getattr(self._held, "count", 0)
        if held:
            self.nested.append("".join(traceback.format_stack(limit=12)))
        self._held.count = held + 1
        with self._lock:
            self._out += 1
            self.peak = max(self.peak, self._out)

    def checkin(self, *_args: Any) -> None:
        self._held.count = max(getattr(self._held, "count", 0) - 1, 0)
        with self._lock:
            self._out -= 1

    def connect(self, *_args: Any) -> None:
        with self._lock:
            self.opened += 1


@contextmanager
def watch_pools(store: Store) -> Iterator[PoolWatch]:
    """Count the checkouts of ``store``'s pools until the block ends."""
    watch = PoolWatch()
    hooks = [("checkout", watch.checkout), ("checkin", watch.checkin), ("connect", watch.connect)]
    pools = [engine.pool for engine in store_engines(store)]
    for pool in pools:
        for name, hook in hooks:
            event.listen(pool, name, hook)
    try:
        yield watch
    finally:
        for pool in pools:
            for name, hook in hooks:
                event.remove(pool, name, hook)
