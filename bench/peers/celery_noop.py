"""The worker-side code of ``bench/sessions/sessions.py``: a plain Celery app with a no-op task,
and the no-op surehand agent. Workers import it with ``PYTHONPATH`` the repository::

    celery -A bench.peers.celery_noop worker --pool threads --concurrency 4 -Q bench.plain
    SUREHAND_AGENTS=DEV=bench.peers.celery_noop:noop_agent surehand worker --roles DEV \
        --concurrency 4

``BENCH_BROKER_URL`` names the broker. ``BENCH_PLAIN_CONFIG=surehand`` gives the plain app
surehand's Celery settings (events on, prefetch 1, priority steps, its Redis transport)
instead of Celery's defaults, which separates the cost of those settings from the cost of a
session.
``BENCH_PLAIN_CONFIG=celery+db`` gives it what a user who wants Celery to be durable would set:
``task_acks_late``, ``task_track_started``, ``task_reject_on_worker_lost``, prefetch 1 and the
SQLAlchemy database result backend ``BENCH_RESULT_BACKEND`` (``db+postgresql+psycopg://...``);
its task ``bench.durable`` stores its result there (STARTED, then SUCCESS), the bench counts
SUCCESS rows in ``celery_taskmeta``.
``BENCH_DONE_FILE`` names a file that each finished plain task appends one byte to: that is how
the bench counts completions without adding a Redis command per task.

The *floor* task (``bench.floor``, run with surehand's Celery settings) does the least any
fenced session has to do, with none of surehand's code: a durable single-row write to claim
(a Postgres INSERT, autocommit), a lease taken with ``SET NX PX`` in a script, the lease released
with a compare-and-delete script, and a durable single-row write to settle (an UPDATE guarded
by the state it expects). ``BENCH_FLOOR_DATABASE_URL`` (a libpq URL) and
``BENCH_FLOOR_REDIS_URL`` name where; the table ``bench_floor`` must exist.
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import psycopg
import redis
from celery import Celery

from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.queue.celery_app import make_celery

PLAIN_TASK = "bench.noop"
DURABLE_TASK = "bench.durable"
FLOOR_TASK = "bench.floor"
FLOOR_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS bench_floor (key text PRIMARY KEY, state text NOT NULL, "
    "at timestamptz NOT NULL DEFAULT now())"
)


def _app() -> Celery:
    broker = os.environ.get("BENCH_BROKER_URL", "memory://")
    if os.environ.get("BENCH_PLAIN_CONFIG") == "surehand":
        return make_celery(Settings.model_validate({"broker_url": broker}))
    if os.environ.get("BENCH_PLAIN_CONFIG") == "celery+db":
        durable = Celery(
            "durable",
            broker=broker,
            backend=os.environ["BENCH_RESULT_BACKEND"],
            set_as_current=False,
        )
        durable.conf.update(
            task_acks_late=True,
            task_track_started=True,
            task_reject_on_worker_lost=True,
            worker_prefetch_multiplier=1,
        )
        return durable
    app = Celery("plain", broker=broker, set_as_current=False)
    app.conf.task_ignore_result = True
    return app


app = _app()
_done_fd: int | None = None


def _mark_done() -> None:
    global _done_fd
    path = os.environ.get("BENCH_DONE_FILE")
    if not path:
        return
    if _done_fd is None:
        _done_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_done_fd, b".")


@app.task(name=PLAIN_TASK, ignore_result=True)
def noop() -> None:
    """The plain Celery task: does nothing but count itself."""
    _mark_done()


@app.task(name=DURABLE_TASK)
def durable() -> str:
    """The no-op task of ``celery+db``: its result (and its STARTED state) go to the database."""
    return "ok"


_LEASE_TAKE = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"
_LEASE_DROP = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


class _Floor:
    """Per-process clients of the floor task: one Postgres connection per worker thread (as a
    pool would hand out), one Redis client with the two lease scripts registered."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.redis = redis.Redis.from_url(os.environ["BENCH_FLOOR_REDIS_URL"])
        self.take = self.redis.register_script(_LEASE_TAKE)
        self.drop = self.redis.register_script(_LEASE_DROP)

    def database(self) -> psycopg.Connection[Any]:
        connection: psycopg.Connection[Any] | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = psycopg.connect(os.environ["BENCH_FLOOR_DATABASE_URL"], autocommit=True)
            self._local.connection = connection
        return connection


_floor: _Floor | None = None
_floor_lock = threading.Lock()


def _floor_clients() -> _Floor:
    global _floor
    with _floor_lock:
        if _floor is None:
            _floor = _Floor()
        return _floor


@app.task(name=FLOOR_TASK, ignore_result=True)
def floor() -> None:
    """Claim (durable write), take the lease, release it, settle (durable write); nothing else."""
    clients, key = _floor_clients(), uuid.uuid4().hex
    database = clients.database()
    database.execute("INSERT INTO bench_floor (key, state) VALUES (%s, 'active')", (key,))
    clients.take(keys=[f"lease:{key}"], args=[key, 30_000])
    clients.drop(keys=[f"lease:{key}"], args=[key])
    database.execute(
        "UPDATE bench_floor SET state = 'review' WHERE key = %s AND state = 'active'", (key,)
    )
    _mark_done()


def noop_agent(ctx: SessionContext) -> str:
    """The no-op surehand agent: no operation, returns at once (its return becomes the REPORT)."""
    return "ok"
