"""Sharing kombu's broker connection pools between the Celery apps of one process.

Celery takes an app's broker pool from ``kombu.pools.connections``, a process-wide map keyed by
connection equality: every app on the same broker URL publishes through one pool. Closing that
pool when one ``Surehand`` closes would break every other instance's publishes ("Acquire on
closed pool"), so apps count themselves as users and the last one to leave closes the pool.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Hashable

from celery import Celery
from kombu import pools
from kombu.utils.collections import eqhash

# Reentrant: a dropped Surehand's finalizer may run (garbage collection) while this thread
# holds the lock, and it releases its app here.
_lock = threading.RLock()
_users: Counter[Hashable] = Counter()
_GROUPS = (pools.producers, pools.connections)


def use(app: Celery) -> Callable[[], None]:
    """Count ``app`` as a user of its broker's shared pool; returns its release (idempotent),
    which closes the pool once no app of this process uses that broker any more."""
    key = eqhash(app.connection_for_write())
    with _lock:
        _users[key] += 1
    released = threading.Event()

    def release() -> None:
        with _lock:
            if released.is_set():
                return
            released.set()
            _users[key] -= 1
            last = _users[key] <= 0
            if last:
                del _users[key]
            # Both maps store their keys as eqhash values: pop the pools by that key. The
            # producer pool wraps the connection pool, so it must go with it.
            closing = [dict.pop(group, key, None) for group in _GROUPS] if last else []
        for pool in filter(None, closing):
            pool.force_close_all()
        app.close()

    return release


def users(app: Celery) -> int:
    """How many apps of this process use ``app``'s broker pool (for tests and diagnostics)."""
    with _lock:
        return _users[eqhash(app.connection_for_write())]
