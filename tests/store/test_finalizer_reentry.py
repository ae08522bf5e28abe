"""A dropped handle's finalizer may run in any thread, at any allocation -- also while that
thread makes a shared engine or registers a broker app under the lock the finalizer needs.
Found as a hung CI run: garbage collection inside ``create_engine`` ran a finalizer that
waited for the engine cache's lock its own thread held."""

from __future__ import annotations

import threading
from pathlib import Path

from celery import Celery
from sqlalchemy import Engine, create_engine

from surehand.queue import broker_pools
from surehand.store.shared_engines import acquire_engine, release_engine


def finishes(work: threading.Thread) -> bool:
    work.start()
    work.join(timeout=10)
    return not work.is_alive()


def test_a_finalizer_releasing_an_engine_while_one_is_made_does_not_deadlock(
    tmp_path: Path,
) -> None:
    dropped = ("dropped", str(tmp_path))
    acquire_engine(dropped, lambda: create_engine(f"sqlite:///{tmp_path / 'a.sqlite3'}"))

    def make_while_a_finalizer_runs() -> Engine:
        release_engine(dropped)  # what a collected handle's finalizer does mid-allocation
        return create_engine(f"sqlite:///{tmp_path / 'b.sqlite3'}")

    made: list[Engine] = []
    key = ("made", str(tmp_path))
    work = threading.Thread(
        target=lambda: made.append(acquire_engine(key, make_while_a_finalizer_runs)), daemon=True
    )
    assert finishes(work)
    assert len(made) == 1
    release_engine(key)


def test_a_finalizer_releasing_a_broker_app_while_one_registers_does_not_deadlock() -> None:
    first = Celery(broker="memory://", set_as_current=False)
    release_first = broker_pools.use(first)

    def register_while_a_finalizer_runs() -> None:
        with broker_pools._lock:  # a use() in progress in this thread
            release_first()

    assert finishes(threading.Thread(target=register_while_a_finalizer_runs, daemon=True))
    assert broker_pools.users(first) == 0
