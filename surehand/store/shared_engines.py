"""Engines shared in one process: every store on one database (by URL, role and pool
settings) uses one set of pools, counted by its users, and a forked child drops the parent's
pools instead of reusing their connections."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from sqlalchemy import Engine

# Every engine made by :mod:`.engine`, held weakly: the fork hook must not keep an engine (and
# its pooled connections) alive after its last user dropped it.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()


def forget_at_fork(engine: Engine) -> Engine:
    """Register ``engine`` to have its pools dropped in a forked child; returns it."""
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
