"""What ``sessions.py`` measures side by side: the workers it starts, each variant (plain
Celery, the floor, Celery made durable, DBOS, a surehand session on SQLite or Postgres) as a
way to publish ``n`` messages and count how many have finished."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from celery import Celery
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from bench.common.databases import fresh_database, libpq
from bench.common.procs import cpu_seconds, stop_group
from bench.common.services import RedisServer, spawn_argv, wait_ready
from bench.peers.celery_noop import (
    DURABLE_TASK,
    FLOOR_TABLE_DDL,
    FLOOR_TASK,
    PLAIN_TASK,
)
from bench.sessions.sessions_tables import console
from surehand.config import Settings
from surehand.facade import Surehand
from surehand.model import Bucket, Task
from surehand.queue.celery_app import make_celery, publish_session
from surehand.store import Store
from surehand.store import schema as tables
from surehand.store.schema import metadata

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO / "bench" / "peers"
BENCH_DATABASE = "surehand_bench_sessions"
DBOS_DATABASE = "surehand_bench_dbos"


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        stop_group(self.process)


def start_worker(argv: list[str], env: dict[str, str], log: Path) -> Worker:
    proc = spawn_argv(argv, {"PYTHONPATH": str(REPO), **env}, log, cwd=REPO)
    wait_ready(proc, "ready.")
    return Worker(proc.process, log)


@dataclass
class Variant:
    """One thing to measure: how to publish ``n`` messages and how many have finished."""

    name: str
    publish: Callable[[int], None]
    completed: Callable[[], int]
    workers: list[Worker] = field(default_factory=list)
    # Untimed work before a batch's clock starts (DBOS: enqueue the batch on a paused queue)
    # and after it stopped (DBOS: back to idle polling).
    prepare: Callable[[int], None] = lambda _n: None
    finish: Callable[[], None] = lambda: None
    batches: list[dict[str, Any]] = field(default_factory=list)

    def cpu_seconds(self) -> float:
        return sum(worker.cpu_seconds() for worker in self.workers)


def plain_variant(
    name: str,
    redis_server: RedisServer,
    tmp: Path,
    options: argparse.Namespace,
    conf: str,
    *,
    task: str = PLAIN_TASK,
    extra_env: dict[str, str] | None = None,
) -> Variant:
    queue = f"bench.{name.replace('+', '_')}"
    done = tmp / f"{queue}.done"
    done.touch()
    env = {"BENCH_BROKER_URL": redis_server.url(0), "BENCH_DONE_FILE": str(done)}
    env.update(extra_env or {})
    if conf == "surehand":
        env["BENCH_PLAIN_CONFIG"] = "surehand"
        app = make_celery(Settings.model_validate({"broker_url": redis_server.url(0)}))
    else:
        app = Celery("plain", broker=redis_server.url(0), set_as_current=False)
    workers = [
        start_worker(
            [
                *(sys.executable, "-m", "celery", "-A", "bench.peers.celery_noop", "worker"),
                *("--pool", "threads", "--concurrency", str(options.concurrency), "-Q", queue),
                *("--without-mingle", "--without-gossip", "--loglevel", "INFO"),
                *("-n", f"{queue}-{i}@%h"),
            ],
            env,
            tmp / f"{queue}-{i}.log",
        )
        for i in range(options.workers)
    ]

    def publish(n: int) -> None:
        for _ in range(n):
            app.send_task(task, queue=queue, routing_key=queue)

    return Variant(name, publish, lambda: done.stat().st_size, workers)


def floor_variant(
    database_url: str, redis_server: RedisServer, tmp: Path, options: argparse.Namespace
) -> Variant:
    """The least a fenced session must do (see ``celery_noop.floor``), on surehand's Celery
    settings, the bench's Postgres database and the leases' Redis database."""
    with psycopg.connect(libpq(database_url), autocommit=True) as connection:
        connection.execute(FLOOR_TABLE_DDL)
        connection.execute("TRUNCATE bench_floor")
    env = {
        "BENCH_FLOOR_DATABASE_URL": libpq(database_url),
        "BENCH_FLOOR_REDIS_URL": redis_server.url(1),
    }
    return plain_variant(
        "floor", redis_server, tmp, options, "surehand", task=FLOOR_TASK, extra_env=env
    )


def celery_db_variant(
    database_url: str, redis_server: RedisServer, tmp: Path, options: argparse.Namespace
) -> Variant:
    """Plain Celery made durable the usual way (see ``celery_noop``), results in Postgres."""
    backend_url = "db+" + make_url(database_url).render_as_string(hide_password=False)
    env = {"BENCH_PLAIN_CONFIG": "celery+db", "BENCH_RESULT_BACKEND": backend_url}
    variant = plain_variant(
        "celery+db", redis_server, tmp, options, "default", task=DURABLE_TASK, extra_env=env
    )
    connection = psycopg.connect(libpq(database_url), autocommit=True)

    def completed() -> int:
        try:
            row = connection.execute(
                "SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'"
            ).fetchone()
        except psycopg.errors.UndefinedTable:  # the backend creates it on its first result
            return 0
        return int(row[0]) if row else 0

    variant.completed = completed
    return variant


def dbos_variant(admin_url: str, tmp: Path, options: argparse.Namespace) -> Variant:
    """A DBOS queue served by ``--workers`` processes of ``dbos_worker.py`` (see the docstring)."""
    from dbos import DBOSClient

    from bench.peers.dbos_worker import APP, QUEUE, WORKFLOW

    system_database = libpq(fresh_database(admin_url, DBOS_DATABASE))
    workers = []
    for i in range(options.workers):  # one at a time: the first launch migrates the schema
        workers.append(
            start_worker(
                [
                    *(sys.executable, str(PEERS / "dbos_worker.py")),
                    *("--worker-concurrency", str(options.concurrency)),
                    *("--polling", str(options.dbos_polling)),
                ],
                {"BENCH_DBOS_DATABASE_URL": system_database, "BENCH_DBOS_EXECUTOR": f"dbos-{i}"},
                tmp / f"dbos-{i}.log",
            )
        )
    client = DBOSClient(system_database_url=system_database, application_name=APP)
    queue = client.retrieve_queue(QUEUE)
    assert queue is not None, "the DBOS workers registered no queue"
    counter = psycopg.connect(system_database, autocommit=True)

    def signal_workers(number: signal.Signals) -> None:
        for worker in workers:
            os.killpg(worker.process.pid, number)

    def prepare(n: int) -> None:
        queue.set_worker_concurrency(0)  # paused: every worker's budget is 0
        signal_workers(signal.SIGCONT)
        for _ in range(n):
            client.enqueue(
                {"queue_name": QUEUE, "workflow_name": WORKFLOW, "app_version": "bench"},
                uuid.uuid4().hex,
            )

    def publish(_n: int) -> None:
        queue.set_worker_concurrency(options.concurrency)

    def finish() -> None:  # stopped while the other variants run: no polls to load them
        signal_workers(signal.SIGSTOP)

    def completed() -> int:
        row = counter.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' AND name = %s",
            (WORKFLOW,),
        ).fetchone()
        return int(row[0]) if row else 0

    finish()
    return Variant("dbos", publish, completed, workers, prepare=prepare, finish=finish)


@dataclass
class SessionBackend:
    name: str
    url: str
    role: str
    handle: Surehand
    pending: list[Task] = field(default_factory=list)


def session_variant(
    backend: SessionBackend, redis_server: RedisServer, tmp: Path, options: argparse.Namespace
) -> Variant:
    env = {
        "SUREHAND_DATABASE_URL": backend.url,
        "SUREHAND_BROKER_URL": redis_server.url(0),
        "SUREHAND_REDIS_URL": redis_server.url(1),
        "SUREHAND_AGENTS": f"{backend.role}=bench.peers.celery_noop:noop_agent",
        "SUREHAND_WORK_DIR": str(tmp / "sessions"),
        "SUREHAND_LOGLEVEL": "info",
    }
    workers = [
        start_worker(
            [
                *(sys.executable, "-m", "surehand", "worker", "--roles", backend.role),
                *("--concurrency", str(options.concurrency), "--pool", "threads"),
                *("--hostname", f"session-{backend.name}-{i}@%h"),
            ],
            env,
            tmp / f"session-{backend.name}-{i}.log",
        )
        for i in range(options.workers)
    ]
    engine = backend.handle.store.engine
    reviewed = (
        select(func.count())
        .select_from(tables.tasks)
        .where(tables.tasks.c.bucket == Bucket.REVIEW.value)
    )

    app = make_celery(Settings.model_validate({"broker_url": redis_server.url(0)}))

    def publish(n: int) -> None:
        batch, backend.pending[:] = backend.pending[:n], backend.pending[n:]
        for task in batch:  # exactly what Surehand.publish does for each committed TASK
            publish_session(app, task.task_id, task.fields.recipient, task.fields.priority)

    def completed() -> int:
        with engine.connect() as connection:
            return int(connection.execute(reviewed).scalar_one())

    return Variant(f"session/{backend.name}", publish, completed, workers)


def postgres_url(admin_url: str) -> str:
    return fresh_database(admin_url, BENCH_DATABASE).render_as_string(hide_password=False)


def prepare_backend(name: str, url: str, role: str, count: int, redis_url: str) -> SessionBackend:
    """A migrated store with ``count`` committed TASKs for ``role`` in inbox, unpublished."""
    store = Store(url, auto_upgrade=True)
    store.upgrade()
    with store.engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())
    store.dispose()
    settings = Settings.model_validate({"database_url": url, "redis_url": redis_url})
    handle = Surehand(settings=settings)
    with console.status(f"creating {count} TASKs on {name}"):
        for n in range(count):
            handle.write_task(
                sender="PM",
                recipient=role,
                subject=f"no-op {n}",
                body="Do nothing, then report.",
                client_submission_id=f"bench-{uuid.uuid4().hex}",
            )
    backend = SessionBackend(name, url, role, handle)
    while len(backend.pending) < count:  # the store lists at most 1,000 at a time
        page = handle.list_tasks(
            bucket=Bucket.INBOX,
            limit=min(1000, count - len(backend.pending)),
            offset=len(backend.pending),
        )
        if not page:
            break
        backend.pending += page
    return backend
