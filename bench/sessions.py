"""Benchmark agent sessions against plain Celery tasks on the same broker and worker count.

    python bench/sessions.py [--quick] [--rounds N] [--sessions N] [--plain N]
                             [--workers N] [--concurrency N] [--no-postgres]
                             [--leases N] [--heartbeat-window S]

Everything runs on one private ``redis-server`` started here (broker in database 0, leases in
database 1), never on a shared Redis. Side by side in one run:

(a) throughput: ``--workers`` processes with ``--concurrency`` threads each, for
    * ``plain``: ``celery worker`` running a no-op task on a bare Celery app (Celery defaults);
    * ``plain+conf``: the same no-op task on an app with surehand's Celery settings (task
      events on, prefetch 1, priority steps, kombu's Redis transport with one redis-py client
      per channel), to separate those settings from the session;
    * ``floor`` (with Postgres): the least any fenced session must do, with none of
      surehand's code, on surehand's Celery settings: a durable single-row INSERT to claim, a
      lease taken (``SET NX PX`` script) and released (compare-and-delete script), a durable
      single-row UPDATE to settle (``celery_noop.floor``). What it reaches against ``plain``
      bounds what a session with a durable claim and settle can reach on this machine;
    * ``celery+db`` (with Postgres): what a user who wants plain Celery to be durable would
      deploy: the no-op task with ``task_acks_late``, ``task_track_started``,
      ``task_reject_on_worker_lost``, prefetch 1 and the SQLAlchemy database result backend
      (``db+postgresql+psycopg://``) on the bench's Postgres database; otherwise Celery's
      defaults. Counted by its SUCCESS rows in ``celery_taskmeta``;
    * ``dbos`` (with Postgres): the durable-execution alternative: ``--workers`` processes of
      ``bench/dbos_worker.py``, each serving one DBOS queue with ``worker_concurrency`` =
      ``--concurrency`` (the same total concurrency) and ``--dbos-polling`` seconds between
      queue polls (DBOS's default is 1 s, which would cap a worker at ``--concurrency``
      workflows a second); the worker processes are stopped (SIGSTOP) between its batches, so
      that 100 polls a second do not load the other variants' batches (and continued before
      the untimed enqueue), its system database ``surehand_bench_dbos`` on the same Postgres; one
      workflow with one no-op step per message. A batch is enqueued with ``DBOSClient`` while
      the queue's worker concurrency is 0 (not timed: the TASKs of the session variants are
      created before their batch too) and timed from the moment it is set back; counted by the
      workflows in state SUCCESS;
    * ``session/sqlite`` and ``session/postgres``: ``surehand worker`` running a no-op agent
      for committed TASKs (claim, lease, heartbeat thread, agent, record return, settle with a
      REPORT to ``review``, release). The Postgres admin URL comes from
      ``SUREHAND_BENCH_DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1/test``);
      the bench uses its own database ``surehand_bench_sessions``, emptied at the start.
    The variants run in interleaved rounds (shuffled each round), every worker set idling while
    another runs, so they share the machine's noise; ratios are taken within a round and the
    median across rounds is reported.
(b) Redis commands per message: ``INFO commandstats`` deltas on the private server, minus the
    idle rate measured with every worker idle; CPU per message from ``/proc`` for the workers
    and for every postgres process (the server shares this machine's cores), and how busy the
    whole machine was.
(c) where a session's time goes: an in-process profile of sequential no-op sessions, per phase,
    with SQL statements (through SQLAlchemy or on the driver's cursor) and what made the
    writes durable (transaction commits, autocommit statements) per session.
(d) heartbeat cost: ``--leases`` (1,000) concurrent leases, each renewed by its own
    ``Heartbeat`` thread at the default interval (10 s, TTL 30 s) for ``--heartbeat-window``
    seconds: renew commands per second and CPU% of this process and of redis-server.

Results are printed as rich tables and saved to ``bench/results/sessions-<UTC>.json``.
This is a benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from celery import Celery
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from celery_noop import (  # noqa: E402
    DURABLE_TASK,
    FLOOR_TABLE_DDL,
    FLOOR_TASK,
    PLAIN_TASK,
    noop_agent,
)
from databases import fresh_database, libpq  # noqa: E402
from private_redis import RedisServer, wait_for  # noqa: E402
from procs import exit_on_sigterm, stop_group  # noqa: E402
from store_counts import counted  # noqa: E402

from surehand.config import Settings  # noqa: E402
from surehand.dispatcher import runner as runner_module  # noqa: E402
from surehand.dispatcher.sessions import Session  # noqa: E402
from surehand.facade import Surehand  # noqa: E402
from surehand.model import Bucket, Task  # noqa: E402
from surehand.queue.celery_app import make_celery, publish_session  # noqa: E402
from surehand.queue.heartbeat import Heartbeat  # noqa: E402
from surehand.queue.leases import LeaseStore  # noqa: E402
from surehand.store import Store  # noqa: E402
from surehand.store import schema as tables  # noqa: E402
from surehand.store.schema import metadata  # noqa: E402

RESULTS = BENCH / "results"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BENCH_DATABASE = "surehand_bench_sessions"
DBOS_DATABASE = "surehand_bench_dbos"
# Issue 13's targets: session/postgres against the floor and against what users would deploy.
TARGETS = {
    "session/postgres / floor": 0.85,
    "session/postgres / celery+db": 5.0,
    "session/postgres / dbos": 3.0,
}
BASES = ("plain", "plain+conf", "floor", "celery+db", "dbos")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
console = Console(width=None if sys.stdout.isatty() else 160)  # saved logs keep every column


# -- processes --------------------------------------------------------------------------------


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path

    def cpu_seconds(self) -> float:
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime

    def stop(self) -> None:
        stop_group(self.process)


def start_worker(argv: list[str], env: dict[str, str], log: Path) -> Worker:
    handle = log.open("wb")
    process = subprocess.Popen(
        argv,
        env={**os.environ, "PYTHONPATH": f"{BENCH}{os.pathsep}{REPO}", **env},
        cwd=REPO,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    handle.close()
    worker = Worker(process, log)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"worker exited:\n{log.read_text()[-3000:]}")
        return "ready." in log.read_text(errors="replace")

    wait_for(ready, 120, f"worker {log.name}")
    return worker


# -- variants ---------------------------------------------------------------------------------


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
                *(sys.executable, "-m", "celery", "-A", "celery_noop", "worker"),
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
    from dbos_worker import APP, QUEUE, WORKFLOW

    system_database = libpq(fresh_database(admin_url, DBOS_DATABASE))
    workers = []
    for i in range(options.workers):  # one at a time: the first launch migrates the schema
        workers.append(
            start_worker(
                [
                    *(sys.executable, str(BENCH / "dbos_worker.py")),
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
        "SUREHAND_AGENTS": f"{backend.role}=celery_noop:noop_agent",
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


# -- measuring --------------------------------------------------------------------------------


def run_batch(
    variant: Variant, n: int, redis_server: RedisServer, idle: dict[str, float]
) -> dict[str, Any]:
    target = variant.completed() + n
    variant.prepare(n)
    commands, redis_cpu, worker_cpu = (
        redis_server.commandstats(),
        redis_server.cpu_seconds(),
        variant.cpu_seconds(),
    )
    machine, database = machine_cpu(), postgres_cpu_seconds()
    started = time.perf_counter()
    variant.publish(n)
    wait_for(lambda: variant.completed() >= target, 600, f"{variant.name} to finish {n}")
    seconds = time.perf_counter() - started
    delta = redis_server.commandstats() - commands
    adjusted = {
        name: max(0.0, calls - idle.get(name, 0.0) * seconds) / n for name, calls in delta.items()
    }
    batch = {
        "messages": n,
        "seconds": seconds,
        "per_second": n / seconds,
        "redis_commands_per_message": sum(adjusted.values()),
        "redis_commands": {k: round(v, 3) for k, v in sorted(adjusted.items()) if v >= 0.005},
        "worker_cpu_ms_per_message": 1000 * (variant.cpu_seconds() - worker_cpu) / n,
        "redis_cpu_ms_per_message": 1000 * (redis_server.cpu_seconds() - redis_cpu) / n,
        "postgres_cpu_ms_per_message": 1000 * (postgres_cpu_seconds() - database) / n,
        "machine_busy_percent": machine_busy_percent(machine, machine_cpu()),
    }
    variant.batches.append(batch)
    variant.finish()
    return batch


def machine_cpu() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values), values[3] + values[4]  # idle + iowait


def machine_busy_percent(before: tuple[int, int], after: tuple[int, int]) -> float:
    total, idle = after[0] - before[0], after[1] - before[1]
    return 100.0 * (1 - idle / total) if total else 0.0


def postgres_cpu_seconds() -> float:
    """CPU time of every postgres process on this machine (the server shares its cores)."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if name.startswith("postgres"):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


def idle_rates(redis_server: RedisServer, seconds: float = 3.0) -> dict[str, float]:
    """Redis commands per second with every worker idle (BRPOP timeouts, heartbeats)."""
    before = redis_server.commandstats()
    time.sleep(seconds)
    delta = redis_server.commandstats() - before
    return {name: calls / seconds for name, calls in delta.items()}


def summarise(variant: Variant) -> dict[str, Any]:
    batches = variant.batches
    commands: Counter[str] = Counter()
    for batch in batches:
        commands.update({k: v / len(batches) for k, v in batch["redis_commands"].items()})
    return {
        "name": variant.name,
        "batches": batches,
        "per_second_median": statistics.median(b["per_second"] for b in batches),
        "redis_commands_per_message": statistics.median(
            b["redis_commands_per_message"] for b in batches
        ),
        "redis_commands": {k: round(v, 2) for k, v in commands.most_common()},
        "worker_cpu_ms_per_message": statistics.median(
            b["worker_cpu_ms_per_message"] for b in batches
        ),
        "redis_cpu_ms_per_message": statistics.median(
            b["redis_cpu_ms_per_message"] for b in batches
        ),
        "postgres_cpu_ms_per_message": statistics.median(
            b["postgres_cpu_ms_per_message"] for b in batches
        ),
        "machine_busy_percent": statistics.median(b["machine_busy_percent"] for b in batches),
    }


# -- phase profile (in-process) ---------------------------------------------------------------


@contextmanager
def timed_phases(phases: dict[str, list[float]]) -> Iterator[None]:
    """Wrap the runner's steps so that each call's wall time lands in ``phases``."""
    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                phases.setdefault(phase, []).append(time.perf_counter() - started)

        patched.append((owner, attribute, original))
        setattr(owner, attribute, timed)

    wrap(runner_module, "claim", "claim (one store write)")
    wrap(LeaseStore, "acquire_with_generation", "lease SET NX PX + generation (one EVALSHA)")
    wrap(Heartbeat, "start", "heartbeat start (thread)")
    wrap(Heartbeat, "stop", "heartbeat stop (join)")
    # One transaction for an agent without operations; with operations the return commits
    # first, on its own (both inside this phase).
    wrap(Session, "settle", "settle: return + REPORT + review + end (one write)")
    wrap(LeaseStore, "release", "lease compare-and-delete")
    wrap(runner_module.SessionRunner, "run", "whole session")
    try:
        yield
    finally:
        for owner, attribute, original in reversed(patched):
            setattr(owner, attribute, original)


def profile_sessions(
    backend: SessionBackend, count: int, redis_server: RedisServer
) -> dict[str, Any]:
    """Sequential no-op sessions in this process: per-phase time, SQL and Redis per session."""
    handle = backend.handle
    handle.registry.register(backend.role, noop_agent)
    batch, backend.pending[:] = backend.pending[:count], backend.pending[count:]
    handle.runner  # noqa: B018  (build the runner and connect before measuring)
    handle.leases.ping()
    phases: dict[str, list[float]] = {}
    commands = redis_server.commandstats()
    with counted(handle.store) as sql, timed_phases(phases):
        for task in batch:
            outcome = handle.runner.run(task.task_id)
            assert outcome.outcome == "settled", outcome
    redis_delta = redis_server.commandstats() - commands
    n = len(batch)
    return {
        "sessions": n,
        "ms_per_session": {phase: 1000 * sum(times) / n for phase, times in sorted(phases.items())},
        "sql_statements_per_session": {k: v / n for k, v in sql.statements.most_common()},
        "durable_commits_per_session": {k: v / n for k, v in sql.durable.items()},
        "redis_commands_per_session": {k: v / n for k, v in redis_delta.most_common()},
    }


# -- heartbeats -------------------------------------------------------------------------------


def heartbeat_cost(redis_server: RedisServer, leases: int, window: float) -> dict[str, Any]:
    """``leases`` live leases, each renewed by its own Heartbeat thread at the default interval."""
    settings = Settings()
    ttl_ms = int(settings.lease_ttl_seconds * 1000)
    interval = settings.heartbeat_seconds
    store = LeaseStore(
        redis.Redis.from_url(redis_server.url(1), decode_responses=True),
        namespace=f"bench-{uuid.uuid4().hex[:8]}",
    )
    beats: list[Heartbeat] = []
    with console.status(f"starting {leases} heartbeats over one interval ({interval:g}s)"):
        for n in range(leases):
            task_id, attempt_id = f"TASK-20260101-{n:04d}", uuid.uuid4().hex
            assert store.acquire(task_id, attempt_id, ttl_ms)
            beat = Heartbeat(store, task_id, attempt_id, ttl_ms, interval=interval)
            beat.start()
            beats.append(beat)
            time.sleep(interval / leases)  # sessions start at different times
    with console.status(f"measuring {leases} heartbeats for {window:g}s"):
        commands, redis_cpu = redis_server.commandstats(), redis_server.cpu_seconds()
        renewals = sum(b.renewals for b in beats)
        cpu, started = time.process_time(), time.perf_counter()
        time.sleep(window)
        elapsed = time.perf_counter() - started
        cpu_used = time.process_time() - cpu
        renewed = sum(b.renewals for b in beats) - renewals
        delta = redis_server.commandstats() - commands
        redis_used = redis_server.cpu_seconds() - redis_cpu
    lost = sum(b.lost.is_set() for b in beats)
    for beat in beats:
        beat.stop(timeout=0.1)
    held = sum(1 for n in range(leases) if store.holder(f"TASK-20260101-{n:04d}") is not None)
    store.client.close()
    return {
        "leases": leases,
        "ttl_seconds": settings.lease_ttl_seconds,
        "interval_seconds": interval,
        "window_seconds": elapsed,
        "renewals_per_second": renewed / elapsed,
        "expected_renewals_per_second": leases / interval,
        "redis_commands_per_second": {k: v / elapsed for k, v in delta.most_common()},
        "client_cpu_percent": 100 * cpu_used / elapsed,
        "redis_cpu_percent": 100 * redis_used / elapsed,
        "lost": lost,
        "still_held_after_window": held,
    }


# -- output -----------------------------------------------------------------------------------


def throughput_table(summaries: list[dict[str, Any]], ratios: dict[str, float]) -> Table:
    table = Table(title="Throughput: same broker, same workers (median of rounds)")
    for column in (
        "variant",
        "msgs/s",
        "vs plain",
        "vs plain+conf",
        "vs floor",
        "vs celery+db",
        "vs dbos",
        "Redis cmds/msg",
        "worker CPU ms/msg",
        "redis CPU ms/msg",
        "postgres CPU ms/msg",
        "machine busy %",
    ):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for s in summaries:
        table.add_row(
            s["name"],
            f"{s['per_second_median']:.0f}",
            _ratio(ratios.get(f"{s['name']} / plain")),
            _ratio(ratios.get(f"{s['name']} / plain+conf")),
            _ratio(ratios.get(f"{s['name']} / floor")),
            _ratio(ratios.get(f"{s['name']} / celery+db")),
            _ratio(ratios.get(f"{s['name']} / dbos")),
            f"{s['redis_commands_per_message']:.1f}",
            f"{s['worker_cpu_ms_per_message']:.2f}",
            f"{s['redis_cpu_ms_per_message']:.3f}",
            f"{s['postgres_cpu_ms_per_message']:.2f}",
            f"{s['machine_busy_percent']:.0f}",
        )
    return table


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def commands_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="Redis commands per message, idle-adjusted (mean of rounds)")
    table.add_column("command")
    names = [s["name"] for s in summaries]
    for name in names:
        table.add_column(name, justify="right")
    commands = sorted(
        {c for s in summaries for c in s["redis_commands"]},
        key=lambda c: -max(s["redis_commands"].get(c, 0) for s in summaries),
    )
    for command in commands:
        values = [s["redis_commands"].get(command, 0.0) for s in summaries]
        if max(values) >= 0.05:
            table.add_row(command, *(f"{v:.2f}" for v in values))
    return table


def phases_table(profiles: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="Where a no-op session's time goes (in-process, sequential)")
    table.add_column("phase")
    for name in profiles:
        table.add_column(f"{name} ms", justify="right")
    phases = sorted({p for prof in profiles.values() for p in prof["ms_per_session"]})
    for phase in phases:
        table.add_row(
            phase, *(f"{p['ms_per_session'].get(phase, 0.0):.2f}" for p in profiles.values())
        )
    kinds = sorted({k for p in profiles.values() for k in p["durable_commits_per_session"]})
    for kind in kinds:
        table.add_row(
            f"{kind} / session",
            *(f"{p['durable_commits_per_session'].get(kind, 0.0):.1f}" for p in profiles.values()),
        )
    table.add_row(
        "SQL statements / session",
        *(f"{sum(p['sql_statements_per_session'].values()):.1f}" for p in profiles.values()),
    )
    table.add_row(
        "Redis commands / session",
        *(f"{sum(p['redis_commands_per_session'].values()):.1f}" for p in profiles.values()),
    )
    return table


def heartbeat_table(result: dict[str, Any]) -> Table:
    table = Table(title="Heartbeat cost")
    for column in (
        "leases",
        "TTL / interval",
        "renewals/s",
        "expected/s",
        "client CPU %",
        "redis CPU %",
        "lost",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        str(result["leases"]),
        f"{result['ttl_seconds']:g}s / {result['interval_seconds']:g}s",
        f"{result['renewals_per_second']:.1f}",
        f"{result['expected_renewals_per_second']:.1f}",
        f"{result['client_cpu_percent']:.1f}",
        f"{result['redis_cpu_percent']:.1f}",
        str(result["lost"]),
    )
    return table


# -- main -------------------------------------------------------------------------------------


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3, quick 2)")
    parser.add_argument("--sessions", type=int, help="sessions per batch (default 400)")
    parser.add_argument("--plain", type=int, help="plain tasks per batch (default 2000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per variant")
    parser.add_argument("--concurrency", type=int, default=4, help="threads per worker")
    parser.add_argument("--profile", type=int, default=200, help="in-process profiled sessions")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--leases", type=int, default=1000, help="concurrent heartbeats")
    parser.add_argument("--heartbeat-window", type=float, help="seconds (default 30, quick 12)")
    parser.add_argument(
        "--dbos-polling", type=float, default=0.01, help="DBOS queue polling seconds"
    )
    parser.add_argument("--no-peers", action="store_true", help="without celery+db and dbos")
    options = parser.parse_args()
    options.rounds = options.rounds or (2 if options.quick else 3)
    options.sessions = options.sessions or (150 if options.quick else 400)
    options.plain = options.plain or (800 if options.quick else 2000)
    options.heartbeat_window = options.heartbeat_window or (12.0 if options.quick else 30.0)
    return options


WARMUP = 20


def _reached(variant: Variant, target: int) -> Callable[[], bool]:
    return lambda: variant.completed() >= target


def measure_rounds(
    variants: list[Variant], redis_server: RedisServer, options: argparse.Namespace
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Warm every variant up, then run interleaved rounds; returns idle rates and rates."""
    idle = idle_rates(redis_server)
    for variant in variants:  # connections, imports and caches; not measured
        target = variant.completed() + WARMUP
        variant.prepare(WARMUP)
        variant.publish(WARMUP)
        wait_for(_reached(variant, target), 300, f"the warm-up of {variant.name}")
        variant.finish()
    per_round: list[dict[str, float]] = []
    for number in range(options.rounds):
        rates: dict[str, float] = {}
        for variant in random.sample(variants, len(variants)):
            n = options.plain if variant.name.startswith("plain") else options.sessions
            with console.status(f"round {number + 1}/{options.rounds}: {variant.name} x {n}"):
                rates[variant.name] = run_batch(variant, n, redis_server, idle)["per_second"]
        per_round.append(rates)
        console.log(f"round {number + 1}: " + ", ".join(f"{k} {v:.0f}/s" for k, v in rates.items()))
    return idle, per_round


def ratios_of(
    summaries: list[dict[str, Any]], per_round: list[dict[str, float]]
) -> dict[str, float]:
    ratios: dict[str, float] = {}
    names = [s["name"] for s in summaries]
    for name in names:
        if name.startswith("session/") or name == "floor":
            for base in BASES:
                if base in names and base != name:
                    ratios[f"{name} / {base}"] = statistics.median(
                        r[name] / r[base] for r in per_round
                    )
    return ratios


def start_variants(
    variants: list[Variant],
    backends: list[SessionBackend],
    redis_server: RedisServer,
    tmp: Path,
    options: argparse.Namespace,
) -> None:
    """Start every variant's workers, appending each variant as soon as it runs (so that the
    caller's cleanup stops whatever started)."""
    variants.append(plain_variant("plain", redis_server, tmp, options, "default"))
    variants.append(plain_variant("plain+conf", redis_server, tmp, options, "surehand"))
    variants.extend(session_variant(b, redis_server, tmp, options) for b in backends)
    for backend in backends:
        if backend.name == "postgres":
            variants.append(floor_variant(backend.url, redis_server, tmp, options))
            if not options.no_peers:
                variants.append(celery_db_variant(backend.url, redis_server, tmp, options))
                admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
                variants.append(dbos_variant(admin, tmp, options))


def ratios_by_round(per_round: list[dict[str, float]]) -> dict[str, list[float]]:
    """Every round's ratio of each session variant (and the floor) to each base."""
    found: dict[str, list[float]] = {}
    for rates in per_round:
        for name in rates:
            if not (name.startswith("session/") or name == "floor"):
                continue
            for base in BASES:
                if base in rates and base != name:
                    found.setdefault(f"{name} / {base}", []).append(rates[name] / rates[base])
    return found


def rounds_table(by_round: dict[str, list[float]]) -> Table:
    table = Table(title="Ratios in every round (each within one round)")
    table.add_column("ratio")
    rounds = max((len(v) for v in by_round.values()), default=0)
    for number in range(rounds):
        table.add_column(f"round {number + 1}", justify="right")
    table.add_column("median", justify="right")
    table.add_column("target", justify="right")
    for key, values in by_round.items():
        target = TARGETS.get(key)
        table.add_row(
            key,
            *(f"{v:.2f}" for v in values),
            f"{statistics.median(values):.2f}",
            "" if target is None else f">= {target:g}",
        )
    return table


def print_verdicts(ratios: dict[str, float]) -> None:
    for key, target in TARGETS.items():
        if key in ratios:
            verdict = "meets" if ratios[key] >= target else "misses"
            console.print(f"{key}: {ratios[key]:.2f}x ({verdict} the {target:g}x target)")


def main() -> int:
    options = parse_options()
    exit_on_sigterm()
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="surehand-bench-sessions-"))
    redis_server = RedisServer(tmp)
    variants: list[Variant] = []
    backends: list[SessionBackend] = []
    try:
        stores = [("sqlite", f"sqlite:///{tmp / 'bench.sqlite3'}", "DEV")]
        if not options.no_postgres:
            admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
            stores.append(("postgres", postgres_url(admin), "OPS"))
        count = WARMUP + options.rounds * options.sessions + options.profile
        for name, url, role in stores:
            backends.append(prepare_backend(name, url, role, count, redis_server.url(1)))
        with console.status("starting workers"):
            start_variants(variants, backends, redis_server, tmp, options)
        idle, per_round = measure_rounds(variants, redis_server, options)
        for variant in variants:
            for worker in variant.workers:
                worker.stop()
        profiles = {}
        for backend in backends:
            with console.status(f"profiling {options.profile} sessions on {backend.name}"):
                profiles[backend.name] = profile_sessions(backend, options.profile, redis_server)
        heartbeat = heartbeat_cost(redis_server, options.leases, options.heartbeat_window)
        one_attempt = {b.name: _check_one_attempt_each(b) for b in backends}
    finally:
        for variant in variants:
            for worker in variant.workers:
                worker.stop()
        for backend in backends:
            backend.handle.close()
        redis_server.stop()

    summaries = [summarise(v) for v in variants]
    ratios = ratios_of(summaries, per_round)
    by_round = ratios_by_round(per_round)
    console.print(throughput_table(summaries, ratios))
    console.print(rounds_table(by_round))
    console.print(commands_table(summaries))
    console.print(phases_table(profiles))
    console.print(heartbeat_table(heartbeat))
    print_verdicts(ratios)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "bench": "sessions",
        "at": stamp,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "options": {
            "rounds": options.rounds,
            "sessions_per_batch": options.sessions,
            "plain_per_batch": options.plain,
            "workers": options.workers,
            "concurrency": options.concurrency,
            "pool": "threads",
        },
        "idle_redis_commands_per_second": idle,
        "variants": summaries,
        "per_round_per_second": per_round,
        "ratios": ratios,
        "ratios_by_round": by_round,
        "targets": TARGETS,
        "peers": {
            "celery+db": (
                "celery no-op task returning 'ok'; task_acks_late, task_track_started, "
                "task_reject_on_worker_lost, worker_prefetch_multiplier=1, result_backend "
                "db+postgresql+psycopg (SQLAlchemy database backend, same Postgres server and "
                "database); otherwise Celery defaults; threads pool, same broker and workers"
            ),
            "dbos": (
                f"DBOS queue, worker_concurrency={options.concurrency} on each of "
                f"{options.workers} processes, polling_interval_sec={options.dbos_polling}, "
                "one @DBOS.workflow with one no-op @DBOS.step per message; system database on "
                "the same Postgres server; enqueued by DBOSClient on the paused queue (untimed)"
            ),
        },
        "profiles": profiles,
        "heartbeat": heartbeat,
        "one_attempt_per_task": one_attempt,
    }
    path = RESULTS / f"sessions-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    console.print(f"saved {path.relative_to(REPO)}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _check_one_attempt_each(backend: SessionBackend) -> bool:
    """Every TASK that ran has exactly one attempt (duplicates would show up here)."""
    with backend.handle.store.snapshot() as connection:
        rows = connection.execute(
            select(tables.attempts.c.task_id, func.count())
            .group_by(tables.attempts.c.task_id)
            .having(func.count() > 1)
        ).all()
    return not rows


if __name__ == "__main__":
    raise SystemExit(main())
