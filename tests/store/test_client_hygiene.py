"""A ``Surehand`` releases its connections: on ``close()``, as a context manager, and when it is
dropped without either; instances in one process share one set of pools per database.

Connections are counted on Postgres (a SQLite connection is an in-process file, not a server
backend), in ``pg_stat_activity`` for a database of this module's own, so that other tests and
other runs on the same server never change the count.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from surehand import Surehand
from surehand.config import Settings
from surehand.errors import StoreUnavailable
from surehand.model import Disposition
from surehand.store import Store, counters
from tests.pool_watch import watch_pools
from tests.submission_helpers import REPO, request

TENANT = "hygiene"
SETTLE_S = 30.0  # a closed connection's backend leaves pg_stat_activity shortly after


@pytest.fixture(scope="module")
def own_db(pg_url: str) -> Iterator[str]:
    """A migrated database that only this module's tests connect to."""
    parsed = make_url(pg_url)
    name = f"{parsed.database}_hygiene"
    admin = create_engine(parsed, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = parsed.set(database=name).render_as_string(hide_password=False)
    migrating = Store(url, auto_upgrade=True)
    migrating.ensure_schema()
    migrating.dispose()
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def connections(url: str) -> int:
    """Backends connected to ``url``'s database (counted from another database)."""
    parsed = make_url(url)
    admin = create_engine(parsed.set(database="postgres"), poolclass=NullPool)
    try:
        with admin.connect() as connection:
            query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db")
            return int(connection.execute(query, {"db": parsed.database}).scalar_one())
    finally:
        admin.dispose()


def settles_to(url: str, expected: int) -> int:
    """The connection count once it reaches ``expected`` (or the last count seen): a backend
    whose client closed its socket takes a moment to exit."""
    deadline = time.monotonic() + SETTLE_S
    count = connections(url)
    while count != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        count = connections(url)
    return count


def use(sh: Surehand, sid: str) -> str:
    """A create and a read: a connection from each of the store's three pools."""
    created = sh.write_task(request(client_submission_id=sid))
    assert created.disposition is Disposition.CREATED
    assert created.task_id is not None
    return sh.get_task(created.task_id).task_id


def test_instances_dropped_without_close_release_their_connections(own_db: str) -> None:
    idle = connections(own_db)
    for n in range(30):
        sh = Surehand(own_db, tenant=TENANT)
        use(sh, f"dropped-{n}")
        del sh
    gc.collect()  # the facade's publisher and services refer to each other: a cycle
    assert settles_to(own_db, idle) == idle


def test_nothing_keeps_a_dropped_instances_engines_alive(tmp_path: Path) -> None:
    """Any backend: once the last instance on a URL is dropped, its engines are garbage (the
    fork hook held every engine ever made, and with it the pooled connections)."""
    sh = Surehand(f"sqlite:///{tmp_path / 'dropped.sqlite3'}", tenant=TENANT)
    use(sh, "weak-1")
    engine = weakref.ref(sh.store.engine)
    del sh
    gc.collect()
    assert engine() is None


def test_close_and_the_context_manager_release_the_connections(own_db: str) -> None:
    idle = connections(own_db)
    with Surehand(own_db, tenant=TENANT) as sh:
        use(sh, "context-1")
        assert connections(own_db) > idle
    assert settles_to(own_db, idle) == idle
    closed = Surehand(own_db, tenant=TENANT)
    use(closed, "closed-1")
    closed.close()
    closed.close()  # idempotent
    assert settles_to(own_db, idle) == idle


def test_a_closer_that_fails_does_not_keep_the_database_connections(own_db: str) -> None:
    idle = connections(own_db)
    sh = Surehand(own_db, tenant=TENANT)
    use(sh, "failing-closer")

    def unreachable() -> None:
        raise ConnectionError("redis is gone")

    sh.runtime._closers.insert(0, unreachable)  # say the Redis client's close fails first
    with pytest.raises(ConnectionError):
        sh.close()
    assert settles_to(own_db, idle) == idle


def test_64_threads_each_with_its_own_instance_all_succeed_on_one_set_of_pools(
    own_db: str,
) -> None:
    idle = connections(own_db)
    barrier = threading.Barrier(64)
    engines: set[int] = set()

    # One process's pools together hold at most 3 x the pool size connections; a small pool
    # size leaves room on a server that other test runs share.
    settings = Settings(database_pool_size=2)

    def call(n: int) -> str:
        with Surehand(own_db, tenant=TENANT, settings=settings) as sh:
            engines.add(id(sh.store.engine))
            barrier.wait()
            return use(sh, f"threads-{n}")

    with ThreadPoolExecutor(64) as pool:
        task_ids = list(pool.map(call, range(64)))

    assert len(set(task_ids)) == 64
    assert len(engines) == 1  # one process, one database: one set of pools
    assert settles_to(own_db, idle) == idle


def test_a_forked_child_never_uses_the_parents_connections(own_db: str) -> None:
    """The child gets backends of its own; the parent's pooled connections survive it."""
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from tests.store.test_client_hygiene import fork_probe; fork_probe({own_db!r})",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    assert found["parent_after"] == found["parent_before"]  # the same pooled backend, alive
    assert found["child"] != found["parent_before"]


def fork_probe(url: str) -> None:
    """In a process of its own: the backend pid the parent's pool holds before and after a
    forked child queried through the same instance. Prints one JSON line."""
    with Surehand(url, tenant=TENANT) as sh:
        before = _backend_pid(sh)
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(reader)
            os.write(writer, str(_backend_pid(sh)).encode())
            sh.close()
            os._exit(0)
        os.close(writer)
        child_pid = int(os.read(reader, 64) or b"0")
        os.waitpid(child, 0)
        after = _backend_pid(sh)
    print(json.dumps({"parent_before": before, "child": child_pid, "parent_after": after}))


def _backend_pid(sh: Surehand) -> int:
    with sh.store.snapshot() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


# -- bounded pools ---------------------------------------------------------------------------

BURST = 40  # threads writing at once
BOUND_POOL = 3  # connections per engine


def test_threads_beyond_the_pool_wait_for_a_connection_and_all_write(own_db: str) -> None:
    """40 threads each write through every engine of one store at once (a thousand sessions
    settling together, in small): Postgres never sees more than 3 x the pool size of them,
    and every write lands (the threads beyond the pool waited instead of failing)."""
    idle = connections(own_db)
    store = Store(own_db, pool_size=BOUND_POOL)
    barrier = threading.Barrier(BURST)
    seen: list[int] = []

    def write(n: int) -> list[int]:
        barrier.wait()
        return burst_write(store, f"burst-{n}", seen, own_db)

    try:
        with watch_pools(store) as watch, ThreadPoolExecutor(BURST) as pool:
            numbers = [number for found in pool.map(write, range(BURST)) for number in found]
        assert len(numbers) == 3 * BURST  # every write landed
        assert watch.peak <= 3 * BOUND_POOL
        assert watch.opened <= 3 * BOUND_POOL
        assert max(seen) <= idle + 3 * BOUND_POOL  # counted from another database
    finally:
        store.dispose()
    assert settles_to(own_db, idle) == idle


def burst_write(store: Store, day: str, seen: list[int], url: str) -> list[int]:
    """A write through each of the store's engines; the transaction stays open a moment (as a
    settle's few statements do) and counts the database's backends meanwhile."""
    with store.transaction() as connection:
        connection.execute(text("SELECT pg_sleep(0.05)"))
        numbers = [counters.allocate(connection, "TASK", day)[0]]
    seen.append(connections(url))
    with store.one_write() as connection:
        numbers.append(counters.allocate(connection, "TASK", day)[0])
    ahead = store.allocate_ahead("TASK", day)
    assert ahead is not None
    return [*numbers, ahead[0]]


def test_a_caller_that_waits_out_the_pool_is_told_the_pool_is_exhausted(own_db: str) -> None:
    """Retryable StoreUnavailable naming the pool and the setting, not an unreachable database."""
    store = Store(own_db, pool_size=1, pool_timeout=0.2)
    errors: list[StoreUnavailable] = []

    def second_caller() -> None:
        try:
            with store.snapshot():
                pass
        except StoreUnavailable as error:
            errors.append(error)

    try:
        with store.transaction():
            thread = threading.Thread(target=second_caller)
            thread.start()
            thread.join(timeout=60)
    finally:
        store.dispose()
    assert len(errors) == 1
    assert errors[0].retryable
    assert "pool is exhausted" in errors[0].message
    assert "SUREHAND_DATABASE_POOL_SIZE" in errors[0].message
    assert "unreachable" not in errors[0].message


def test_sqlite_callers_beyond_the_pool_do_not_wait(tmp_path: Path) -> None:
    """SQLite's connections are in-process: a caller beyond the pool opens one of its own."""
    store = Store(f"sqlite:///{tmp_path / 'beyond.sqlite3'}", pool_size=1, pool_timeout=0.01)
    try:
        with store.snapshot() as outer, store.snapshot() as inner:
            assert outer.execute(text("SELECT 1")).scalar_one() == 1
            assert inner.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        store.dispose()
