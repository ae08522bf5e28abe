"""Benchmark the reconciler: pass time against running attempts, and loss detection latency.

    python bench/reconcile.py [--quick] [--passes N] [--no-postgres] [--sessions N] [--kills N]
                              [--only-kills]

(a) Pass time. A store is seeded in bulk (SQLAlchemy Core ``INSERT``s, no service calls) with
    finished TASKs (``review``/``done``/``archive``, one succeeded attempt each, a committed
    receipt each, and a resolved interruption case for 2 % of them) and with TASKs in
    ``active`` whose attempt is ``running``. 99 % of the running attempts hold a live lease in a
    private ``redis-server`` started here; the other 1 % have none, so every pass also notes
    suspects (the grace is set to an hour so that no suspect is judged lost mid-measurement:
    the pass measured is the steady-state scan). Each configuration runs one warm-up pass and
    ``--passes`` timed passes of ``Reconciler.run_once`` in this process; the median is
    reported. Configurations, on Postgres and on SQLite:

      100 / 1,000 / 10,000 running with 100,000 finished TASKs, and
      10,000 running with 1,000 finished TASKs (side by side: all TASKs vs running attempts).

    The Postgres admin URL comes from ``SUREHAND_BENCH_DATABASE_URL`` (default
    ``postgresql+psycopg://postgres@127.0.0.1:5432/test``); the bench creates and drops its own
    database ``surehand_bench_reconcile``. Both databases are ANALYZEd after seeding.

(b) Detection latency, kill -> ``SESSION_LOST``. Measured with scaled-down settings (lease TTL
    1 s, heartbeat 0.3 s, grace 0.5 s, reconcile interval 0.5 s): ``--sessions`` sessions hold
    leases renewed by real ``Heartbeat`` threads on the private Redis; each is "killed" at a
    random moment within ``--spread`` seconds by stopping its heartbeat without releasing the
    lease (what a SIGKILLed worker leaves behind), while the production ``reconcile_loop`` runs
    in a thread (SQLite store). The measured time includes the pass that records the loss and
    admits its successor, which the model leaves out. For the
    default settings (TTL 30 s, heartbeat 10 s, grace 15 s, interval 5 s) the distribution is
    computed analytically from the same model, which the measurement checks:

      D = (TTL - R) + P + G,  R ~ U(0, heartbeat)  (time since the last renewal at the kill),
                              P ~ U(0, interval)   (wait for the first pass after expiry),
                              G = grace            (a pass wakes when a suspect's grace ends;
                                                    Celery beat rounds up to its grid, which
                                                    for the defaults is the same 15 s).

(c) Detection latency with real kills, kill -> ``SESSION_LOST``, same scaled-down settings. A
    deployment of real processes: three ``surehand worker --roles DEV --concurrency 1`` whose
    agent (``sleeping_agent`` below, loaded as ``reconcile:sleeping_agent``) sleeps until its
    session ends, one ``surehand worker --roles OPS`` that runs the reconcile passes, and one
    ``surehand beat`` scheduling them every 0.5 s (the production reconciler, over the broker),
    on Postgres (database ``surehand_bench_kills``; SQLite with ``--no-postgres``) and the
    private Redis. ``--kills`` times: a random DEV worker with a running session is picked, and
    after a random delay in [0, 1) s (so the kill falls anywhere in the heartbeat cycle) its
    process group gets SIGKILL; a replacement worker is started (and is ready before the next
    kill). The kill time is taken right
    after ``killpg`` returns; the loss time is the killed attempt's ``ended_at``, which the
    reconciler writes when it marks it ``SESSION_LOST``. Each lost session's TASK is admitted
    (no intent: ``reexecute``) and its successor keeps a worker busy for the next kill. The
    model bound is TTL + grace + reconcile interval + 1 s of slack (the judging pass itself, its
    ``inspect active`` wait, beat's scheduling jitter): 3.0 s scaled, 51 s with the defaults.

Results are printed as rich tables and saved to ``bench/results/reconcile-<UTC>.json``.
This is a benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from private_redis import RedisServer, wait_for  # bench/ is the script's directory
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, delete, insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.dispatcher.claims import claim
from surehand.dispatcher.reconciler import reconcile_loop
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket, CaseState
from surehand.queue.heartbeat import Heartbeat
from surehand.store import Store, attempts
from surehand.store import schema as tables

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
PG_ADMIN_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_DATABASE = "surehand_bench_reconcile"
LIVE_SHARE = 0.99
CASE_SHARE = 0.02
BATCH = 5000
T0 = datetime(2026, 11, 1, tzinfo=UTC)

console = Console(width=max(120, shutil.get_terminal_size((120, 40)).columns))


# -- seeding ----------------------------------------------------------------------------------


def task_row(task_id: str, bucket: Bucket, epoch: int) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "tenant": "bench",
        "sender": "PM",
        "recipient": "DEV",
        "subject": f"Bench {task_id}",
        "body": "Seeded for the reconciler benchmark.",
        "priority": "P2",
        "thread_key": "",
        "parent": "",
        "references": [],
        "depends_on": [],
        "risk_level": "medium",
        "bucket": bucket.value,
        "revision": 1 + 2 * epoch,
        "epoch": epoch,
        "rework_round": 0,
        "request_digest": "0" * 64,
        "digest_schema_version": "write-task-v1",
        "idempotent": True,
        "client_submission_id": f"sub-{task_id}",
        "document": "---\n---\n",
        "document_digest": "0" * 64,
        "published": True,
        "created_at": T0,
        "updated_at": T0,
    }


def attempt_row(task_id: str, attempt_id: str, state: AttemptState) -> dict[str, Any]:
    finished = state is not AttemptState.RUNNING
    return {
        "attempt_id": attempt_id,
        "task_id": task_id,
        "number": 1,
        "state": state.value,
        "worker": "bench:1:1",
        "lease_id": attempt_id,
        "agent_returned": finished,
        "result": "ok" if finished else None,
        "error": None,
        "bound_operation_id": None,
        "case_id": None,
        "lease_missing_since": None,
        "started_at": T0,
        "ended_at": T0 + timedelta(seconds=30) if finished else None,
    }


def receipt_row(task_id: str) -> dict[str, Any]:
    return {
        "tenant": "bench",
        "client_submission_id": f"sub-{task_id}",
        "digest_schema_version": "write-task-v1",
        "request_digest": "0" * 64,
        "task_id": task_id,
        "task_path": f"fcop/_lifecycle/done/{task_id}-PM-to-DEV.md",
        "state": "committed",
        "document_digest": "0" * 64,
        "result": {"disposition": "created"},
        "created_at": T0,
        "updated_at": T0,
    }


def case_row(task_id: str, attempt_id: str) -> dict[str, Any]:
    return {
        "case_id": f"CASE-{task_id.removeprefix('TASK-')}-1",
        "task_id": task_id,
        "interrupted_attempt_id": attempt_id,
        "interrupted_epoch": 1,
        "prior_lease_id": attempt_id,
        "interrupted_at": T0,
        "revision_at_interruption": 2,
        "revision_at_evaluation": 2,
        "effect_fact": "confirmed",
        "effect_refs": {},
        "admission": "reconcile_only",
        "decided_at": T0,
        "decided_by": "reconciler",
        "successor_attempt_id": None,
        "bound_operation_id": None,
        "state": CaseState.RESOLVED.value,
        "review": None,
    }


def insert_many(store: Store, table: Any, rows: Sequence[dict[str, Any]]) -> None:
    for start in range(0, len(rows), BATCH):
        with store.engine.begin() as connection:
            connection.execute(insert(table), list(rows[start : start + BATCH]))


def seed_finished(store: Store, count: int) -> None:
    finished_buckets = (Bucket.REVIEW, Bucket.DONE, Bucket.ARCHIVE)
    task_rows, attempt_rows, receipt_rows, case_rows = [], [], [], []
    for n in range(count):
        task_id = f"TASK-2026{1 + n // 100_000 % 12:02d}{1 + n // 10_000 % 28:02d}-F{n:06d}"
        attempt_id = uuid.uuid4().hex
        task_rows.append(task_row(task_id, finished_buckets[n % 3], 1))
        attempt_rows.append(attempt_row(task_id, attempt_id, AttemptState.SUCCEEDED))
        receipt_rows.append(receipt_row(task_id))
        if n % int(1 / CASE_SHARE) == 0:
            case_rows.append(case_row(task_id, attempt_id))
    insert_many(store, tables.tasks, task_rows)
    insert_many(store, tables.attempts, attempt_rows)
    insert_many(store, tables.receipts, receipt_rows)
    insert_many(store, tables.interruption_cases, case_rows)


def seed_running(store: Store, leases: redis.Redis, count: int) -> int:
    """``count`` active TASKs with a running attempt; 99 % get a live lease. Returns live."""
    with store.engine.begin() as connection:  # drop the previous configuration's running set
        connection.execute(delete(tables.attempts).where(tables.attempts.c.state == "running"))
        connection.execute(delete(tables.tasks).where(tables.tasks.c.bucket == "active"))
    leases.flushdb()
    task_rows, attempt_rows, live = [], [], []
    for n in range(count):
        task_id = f"TASK-20261130-R{n:06d}"
        attempt_id = uuid.uuid4().hex
        task_rows.append(task_row(task_id, Bucket.ACTIVE, 1))
        attempt_rows.append(attempt_row(task_id, attempt_id, AttemptState.RUNNING))
        if n % 100 != 99:
            live.append((task_id, attempt_id))
    insert_many(store, tables.tasks, task_rows)
    insert_many(store, tables.attempts, attempt_rows)
    with leases.pipeline(transaction=False) as pipe:
        for task_id, attempt_id in live:
            pipe.set(f"lease:{task_id}", attempt_id, px=3_600_000)
        pipe.execute()
    return len(live)


def analyze(store: Store) -> None:
    with store.engine.begin() as connection:
        connection.execute(text("ANALYZE"))


# -- (a) pass time ----------------------------------------------------------------------------


@dataclass
class PassResult:
    backend: str
    finished: int
    running: int
    live: int
    suspected: int
    passes: int
    median_ms: float
    p90_ms: float
    min_ms: float
    per_1k_running_ms: float


def bench_settings(url: str, redis_url: str, **overrides: Any) -> Settings:
    return Settings.model_validate(
        {"database_url": url, "redis_url": redis_url, "lost_grace_seconds": 3600.0, **overrides}
    )


def measure_passes(
    backend: str, url: str, redis_url: str, finished: int, running: int, passes: int
) -> tuple[PassResult, str]:
    sh = Surehand(settings=bench_settings(url, redis_url))
    try:
        reconciler = sh.reconciler
        reconciler.run_once()  # warm-up: connections, statement caches, first suspicion
        times, reports = [], []
        for _ in range(passes):
            started = time.perf_counter()
            reports.append(reconciler.run_once())
            times.append((time.perf_counter() - started) * 1000)
        profile = _profile(reconciler.run_once) if running >= 10_000 else ""
    finally:
        sh.close()
    last = reports[-1]
    assert last.running == running, last
    times.sort()
    median = statistics.median(times)
    return (
        PassResult(
            backend=backend,
            finished=finished,
            running=running,
            live=last.live,
            suspected=last.suspected,
            passes=passes,
            median_ms=round(median, 2),
            p90_ms=round(times[int(0.9 * (len(times) - 1))], 2),
            min_ms=round(times[0], 2),
            per_1k_running_ms=round(median / running * 1000, 3),
        ),
        profile,
    )


def _profile(call: Callable[[], object]) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(18)
    return out.getvalue()


@contextmanager
def postgres_store(admin_url: str, database: str = PG_DATABASE) -> Iterator[str]:
    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{database}"'))
    try:
        yield make_url(admin_url).set(database=database).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def fresh_store(backend: str, tmp: Path, admin_url: str, tag: str) -> Iterator[Store]:
    if backend == "postgres":
        with postgres_store(admin_url) as url:
            store = Store(url, auto_upgrade=True)
            store.ensure_schema()
            try:
                yield store
            finally:
                store.dispose()
        return
    store = Store(f"sqlite:///{tmp / f'reconcile-{tag}.sqlite3'}")
    store.ensure_schema()
    try:
        yield store
    finally:
        store.dispose()


def run_pass_benchmarks(
    backends: Sequence[str],
    configs: Sequence[tuple[int, Sequence[int]]],
    passes: int,
    server: RedisServer,
    tmp: Path,
    admin_url: str,
) -> tuple[list[PassResult], dict[str, str]]:
    results: list[PassResult] = []
    profiles: dict[str, str] = {}
    leases = redis.Redis.from_url(server.url(0))
    for backend in backends:
        for finished, running_counts in configs:
            with fresh_store(backend, tmp, admin_url, f"{finished}") as store:
                started = time.perf_counter()
                seed_finished(store, finished)
                console.log(
                    f"{backend}: seeded {finished:,} finished TASKs in "
                    f"{time.perf_counter() - started:.1f}s"
                )
                for running in running_counts:
                    seed_running(store, leases, running)
                    analyze(store)
                    result, profile = measure_passes(
                        backend, store.url, server.url(0), finished, running, passes
                    )
                    results.append(result)
                    if profile:
                        profiles[f"{backend}/{finished}/{running}"] = profile
                    console.log(
                        f"{backend}: {running:,} running / {finished:,} finished: "
                        f"{result.median_ms} ms"
                    )
    leases.close()
    return results, profiles


# -- (b) detection latency ----------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    ttl: float
    heartbeat: float
    grace: float
    interval: float


SCALED = Timing(ttl=1.0, heartbeat=0.3, grace=0.5, interval=0.5)
DEFAULTS = Timing(ttl=30.0, heartbeat=10.0, grace=15.0, interval=5.0)


def uniform_sum_cdf(x: float, w1: float, w2: float) -> float:
    """P(U(0, w1) + U(0, w2) <= x)."""
    w1, w2 = sorted((w1, w2))
    if x <= 0:
        return 0.0
    if x < w1:
        return x * x / (2 * w1 * w2)
    if x < w2:
        return (2 * x - w1) / (2 * w2)
    if x < w1 + w2:
        return 1 - (w1 + w2 - x) ** 2 / (2 * w1 * w2)
    return 1.0


def analytic(timing: Timing, grid: bool) -> dict[str, float]:
    """Quantiles of D = (TTL - heartbeat) + U(0, heartbeat) + U(0, interval) + grace'."""
    grace = timing.grace
    if grid:  # fixed-period passes (Celery beat): the judging pass is on the interval grid
        grace = -(-timing.grace // timing.interval) * timing.interval
    base = timing.ttl - timing.heartbeat + grace

    def quantile(q: float) -> float:
        low, high = 0.0, timing.heartbeat + timing.interval
        for _ in range(60):
            mid = (low + high) / 2
            if uniform_sum_cdf(mid, timing.heartbeat, timing.interval) < q:
                low = mid
            else:
                high = mid
        return base + high

    return {
        "min": round(base, 3),
        "p50": round(quantile(0.5), 3),
        "p90": round(quantile(0.9), 3),
        "p99": round(quantile(0.99), 3),
        "max": round(base + timing.heartbeat + timing.interval, 3),
        "mean": round(base + (timing.heartbeat + timing.interval) / 2, 3),
    }


def measure_detection(
    sessions: int, spread: float, server: RedisServer, tmp: Path
) -> dict[str, Any]:
    """Kill ``sessions`` heartbeat-kept sessions at random moments; time kill -> SESSION_LOST."""
    url = f"sqlite:///{tmp / 'detection.sqlite3'}"
    settings = Settings.model_validate(
        {
            "database_url": url,
            "redis_url": server.url(0),
            "redis_namespace": "detection",
            "lease_ttl_seconds": SCALED.ttl,
            "heartbeat_seconds": SCALED.heartbeat,
            "lost_grace_seconds": SCALED.grace,
            "reconcile_interval_seconds": SCALED.interval,
        }
    )
    sh = Surehand(settings=settings)
    sh.store.ensure_schema()
    beats: dict[str, tuple[Heartbeat, str]] = {}
    ttl_ms = int(SCALED.ttl * 1000)
    for n in range(sessions):
        task_id = sh.write_task(
            sender="PM", recipient="DEV", subject=f"detect {n}", body="x"
        ).task_id
        assert task_id is not None
        session = claim(sh.services, task_id, worker="bench", message_id=None)
        assert session is not None
        attempt_id = session.attempt.attempt_id
        assert sh.leases.acquire(task_id, attempt_id, ttl_ms)
        beat = Heartbeat(sh.leases, task_id, attempt_id, ttl_ms, interval=SCALED.heartbeat)
        beat.start()
        beats[task_id] = (beat, attempt_id)
    stop = threading.Event()
    loop = threading.Thread(
        target=reconcile_loop, args=(sh.reconciler, stop, SCALED.interval), daemon=True
    )
    loop.start()
    time.sleep(2 * SCALED.interval)  # let the loop settle into its rhythm
    killed: dict[str, datetime] = {}
    order = list(beats)
    moments = sorted(random.uniform(0, spread) for _ in order)
    start = time.monotonic()
    for task_id, moment in zip(order, moments, strict=True):
        time.sleep(max(0.0, start + moment - time.monotonic()))
        beat, _ = beats[task_id]
        beat.stop(timeout=0)  # the process "dies": no more renewals, no release
        killed[task_id] = datetime.now(UTC)
    deadline = time.monotonic() + spread + 10 * (SCALED.ttl + SCALED.grace + SCALED.interval)
    latencies: list[float] = []
    while time.monotonic() < deadline:
        latencies = []
        for task_id, killed_at in killed.items():
            attempt = sh.attempts(task_id)[0]
            if attempt.state is AttemptState.SESSION_LOST and attempt.ended_at is not None:
                latencies.append((attempt.ended_at - killed_at).total_seconds())
        if len(latencies) == len(killed):
            break
        time.sleep(0.25)
    stop.set()
    loop.join(10)
    sh.close()
    return {"sessions": sessions, "kills_spread_seconds": spread, **latency_summary(latencies)}


def latency_summary(latencies: Sequence[float]) -> dict[str, Any]:
    """How many were detected, and their quantiles (nearest rank), in seconds."""
    ordered = sorted(latencies)
    if not ordered:
        return {"detected": 0}

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "detected": len(ordered),
        "min": round(ordered[0], 3),
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": round(ordered[-1], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


# -- (c) detection latency with real kills ------------------------------------------------------

KILL_DATABASE = "surehand_bench_kills"
KILL_WORKERS = 3
KILL_WINDOW = 1.0  # seconds: the random delay before a kill, over three heartbeats
SLACK = 1.0  # the judging pass, its ``inspect active`` wait, beat's jitter
AGENT_SLEEP_SECONDS = 600.0


def sleeping_agent(ctx: SessionContext) -> str:
    """The agent of (c): works (sleeps) until its session ends. Workers load it as
    ``reconcile:sleeping_agent`` with ``PYTHONPATH=bench``."""
    ctx.wait_cancelled(AGENT_SLEEP_SECONDS)
    return "slept"


def model_bound(timing: Timing) -> float:
    """Kill -> SESSION_LOST at most: TTL + grace + reconcile interval + slack."""
    return timing.ttl + timing.grace + timing.interval + SLACK


@dataclass
class KillDeployment:
    """Real ``surehand worker`` and ``surehand beat`` processes, each in its own group."""

    tmp: Path
    env: dict[str, str]
    dev: list[subprocess.Popen[bytes]] = field(default_factory=list)
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)

    @classmethod
    def start(cls, tmp: Path, database_url: str, server: RedisServer) -> KillDeployment:
        agent = "reconcile:sleeping_agent"
        env = {
            "SUREHAND_DATABASE_URL": database_url,
            "SUREHAND_BROKER_URL": server.url(2),
            "SUREHAND_REDIS_URL": server.url(3),
            "SUREHAND_AGENTS": f"DEV={agent},OPS={agent}",
            "SUREHAND_LEASE_TTL_SECONDS": str(SCALED.ttl),
            "SUREHAND_HEARTBEAT_SECONDS": str(SCALED.heartbeat),
            "SUREHAND_LOST_GRACE_SECONDS": str(SCALED.grace),
            "SUREHAND_RECONCILE_INTERVAL_SECONDS": str(SCALED.interval),
            "SUREHAND_HOME": str(tmp / "home"),
            "SUREHAND_WORK_DIR": str(tmp / "sessions"),
            "PYTHONPATH": f"{BENCH}{os.pathsep}{REPO}",
            "PYTHONUNBUFFERED": "1",
        }
        deployment = cls(tmp, env)
        started = [deployment.worker() for _ in range(KILL_WORKERS)]
        started.append(deployment.spawn("worker", "--roles", "OPS", "--concurrency", "1"))
        deployment.others.append(started[-1])
        beat = deployment.spawn("beat")
        deployment.others.append(beat)
        for process in started:
            deployment.wait_for(process, "ready.")
        deployment.wait_for(beat, "beat: Starting")
        return deployment

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"kills-{args[0]}-{len(self.logs) + 1}.log"
        with log.open("wb") as handle:
            process = subprocess.Popen(
                [sys.executable, "-m", "surehand", *args],
                env={**os.environ, **self.env},
                cwd=REPO,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.logs[process.pid] = log
        return process

    def worker(self) -> subprocess.Popen[bytes]:
        process = self.spawn("worker", "--roles", "DEV", "--concurrency", "1")
        self.dev.append(process)
        return process

    def output(self, process: subprocess.Popen[bytes]) -> str:
        return self.logs[process.pid].read_text(errors="replace")

    def wait_for(self, process: subprocess.Popen[bytes], banner: str) -> None:
        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"exited:\n{self.output(process)[-3000:]}")
            return banner in self.output(process)

        wait_for(ready, 120, f"{banner!r} from pid {process.pid}")

    def live_pids(self) -> set[int]:
        return {p.pid for p in self.dev if p.poll() is None}

    def kill(self, pid: int) -> datetime:
        """SIGKILL a DEV worker's process group; the moment it was sent (UTC)."""
        os.killpg(pid, signal.SIGKILL)
        at = datetime.now(UTC)
        [process] = [p for p in self.dev if p.pid == pid]
        process.wait(10)
        self.dev.remove(process)
        return at

    def close(self) -> None:
        for process in [*self.dev, *self.others]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def running_sessions(sh: Surehand, pids: set[int], skip: Collection[str]) -> dict[str, int]:
    """Running attempts (id -> worker pid) of live workers, except those in ``skip``."""
    with sh.store.snapshot() as connection:
        found = attempts.running(connection)
    # ``worker`` is host:pid:thread (runner.worker_identity); threads run in the worker's pid.
    by_pid = {a.attempt_id: int(a.worker.split(":")[1]) for a in found}
    return {a: pid for a, pid in by_pid.items() if pid in pids and a not in skip}


def kill_sessions(
    sh: Surehand, deployment: KillDeployment, kills: int, rng: random.Random
) -> dict[str, datetime]:
    """SIGKILL ``kills`` workers, each at a random moment of a running session; attempt id ->
    the moment its worker was killed."""
    killed: dict[str, datetime] = {}
    deadline = time.monotonic() + 60 + 15 * kills
    while len(killed) < kills and time.monotonic() < deadline:
        running = running_sessions(sh, deployment.live_pids(), killed)
        if not running:
            time.sleep(0.05)
            continue
        attempt_id, pid = rng.choice(sorted(running.items()))
        time.sleep(rng.uniform(0, KILL_WINDOW))
        killed[attempt_id] = deployment.kill(pid)
        # The replacement is ready before the next kill: three workers serve throughout.
        deployment.wait_for(deployment.worker(), "ready.")
        console.log(f"kill {len(killed)}/{kills}: worker {pid} (attempt {attempt_id[:8]})")
    return killed


def wait_for_losses(sh: Surehand, killed: dict[str, datetime], timeout: float) -> list[float]:
    """Seconds from each kill to its attempt's ``SESSION_LOST`` (those seen within timeout)."""
    deadline = time.monotonic() + timeout
    latencies: dict[str, float] = {}
    while len(latencies) < len(killed) and time.monotonic() < deadline:
        with sh.store.snapshot() as connection:
            for attempt_id, killed_at in killed.items():
                attempt = attempts.get(connection, attempt_id)
                if attempt and attempt.state is AttemptState.SESSION_LOST and attempt.ended_at:
                    latencies[attempt_id] = (attempt.ended_at - killed_at).total_seconds()
        time.sleep(0.2)
    return list(latencies.values())


@contextmanager
def kill_store(tmp: Path, admin_url: str, postgres: bool) -> Iterator[str]:
    """A migrated store's URL, for the bench's handle and the deployment's processes."""
    if postgres:
        with postgres_store(admin_url, KILL_DATABASE) as url:
            migrate(url)
            yield url
        return
    url = f"sqlite:///{tmp / 'kills.sqlite3'}"
    migrate(url)
    yield url


def migrate(url: str) -> None:
    store = Store(url, auto_upgrade=True)
    store.ensure_schema()
    store.dispose()


def measure_real_kills(
    kills: int, server: RedisServer, tmp: Path, admin_url: str, postgres: bool
) -> dict[str, Any]:
    """Kill ``kills`` real workers mid-session; time kill -> SESSION_LOST (see (c))."""
    with kill_store(tmp, admin_url, postgres) as url:
        settings = Settings.model_validate(
            {"database_url": url, "redis_url": server.url(3), "broker_url": server.url(2)}
        )
        sh = Surehand(settings=settings)
        sh.store.ensure_schema()
        deployment = KillDeployment.start(tmp, url, server)
        try:
            for n in range(kills + KILL_WORKERS):
                sh.write_task(sender="PM", recipient="DEV", subject=f"sleep {n}", body="Sleep.")
            killed = kill_sessions(sh, deployment, kills, random.Random())
            latencies = wait_for_losses(sh, killed, timeout=10 * model_bound(SCALED))
        finally:
            deployment.close()
            sh.close()
    return {
        "kills": len(killed),
        "database": "postgres" if postgres else "sqlite",
        "workers": KILL_WORKERS,
        "reconciler": "surehand beat + surehand worker --roles OPS",
        "model_bound_seconds": model_bound(SCALED),
        **latency_summary(latencies),
    }


# -- output -----------------------------------------------------------------------------------


def pass_table(results: Sequence[PassResult]) -> Table:
    table = Table(title="reconciler pass time (median of timed passes; grace 1 h: scan only)")
    for column in (
        "db",
        "finished",
        "running",
        "live",
        "suspects",
        "median ms",
        "p90 ms",
        "min ms",
        "ms/1k run",
        "x 100 run",
    ):
        table.add_column(column, justify="right")
    base = {
        (r.backend, r.finished): r.median_ms for r in results if r.running == min_running(results)
    }
    for r in results:
        ratio = (
            r.median_ms / base[(r.backend, r.finished)] if (r.backend, r.finished) in base else 0
        )
        table.add_row(
            r.backend,
            f"{r.finished:,}",
            f"{r.running:,}",
            f"{r.live:,}",
            f"{r.suspected:,}",
            f"{r.median_ms:.1f}",
            f"{r.p90_ms:.1f}",
            f"{r.min_ms:.1f}",
            f"{r.per_1k_running_ms:.2f}",
            f"{ratio:.1f}" if ratio else "-",
        )
    return table


def min_running(results: Sequence[PassResult]) -> int:
    return min(r.running for r in results)


SCALED_NAME = "scaled: TTL 1, hb 0.3, grace 0.5, every 0.5"
DEFAULTS_NAME = "defaults: TTL 30, hb 10, grace 15, every 5"
QUANTILES = ("min", "p50", "p90", "p99", "max", "mean")


def detection_table(
    measured: dict[str, dict[str, Any]], model: dict[str, dict[str, float]]
) -> Table:
    table = Table(
        title="detection latency, kill -> SESSION_LOST (seconds)",
        caption=(
            f"model bound TTL + grace + interval + {SLACK:.0f} s slack: "
            f"scaled {model_bound(SCALED):.1f} s, defaults {model_bound(DEFAULTS):.0f} s"
        ),
    )
    for column in ("settings", "source", "n", *QUANTILES, "bound"):
        table.add_column(column, justify="right")
    for source, values in measured.items():
        if values.get("detected"):
            table.add_row(
                SCALED_NAME,
                source,
                str(values["detected"]),
                *(f"{values[k]:.3f}" for k in QUANTILES),
                f"{model_bound(SCALED):.1f}",
            )
    for name, values in model.items():
        bound = model_bound(SCALED if name == SCALED_NAME else DEFAULTS)
        table.add_row(
            name, "analytic", "-", *(f"{values[k]:.2f}" for k in QUANTILES), f"{bound:.1f}"
        )
    return table


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer rows, fewer passes.")
    parser.add_argument("--passes", type=int, default=9, help="Timed passes per configuration.")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only.")
    parser.add_argument("--sessions", type=int, default=200, help="Sessions killed in (b).")
    parser.add_argument(
        "--spread", type=float, default=10.0, help="Seconds the kills of (b) are spread over."
    )
    parser.add_argument(
        "--kills", type=int, default=24, help="Workers SIGKILLed in (c); 0 skips (c)."
    )
    parser.add_argument("--only-kills", action="store_true", help="Run (c) only.")
    return parser.parse_args()


def main() -> int:
    options = parse_options()
    scale = 10 if options.quick else 1
    passes = 3 if options.quick else options.passes
    backends = ["sqlite"] if options.no_postgres else ["postgres", "sqlite"]
    configs: list[tuple[int, Sequence[int]]] = [
        (100_000 // scale, [100, 1_000 // scale, 10_000 // scale]),
        (1_000 // scale, [10_000 // scale]),
    ]
    admin_url = os.environ.get("SUREHAND_BENCH_DATABASE_URL", PG_ADMIN_DEFAULT)
    results: list[PassResult] = []
    profiles: dict[str, str] = {}
    measured: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="surehand-bench-reconcile-") as directory:
        tmp = Path(directory)
        server = RedisServer(tmp)
        try:
            if not options.only_kills:
                results, profiles = run_pass_benchmarks(
                    backends, configs, passes, server, tmp, admin_url
                )
                measured["heartbeat stopped in-process"] = measure_detection(
                    options.sessions // scale or 20, options.spread / scale, server, tmp
                )
            if options.kills:
                measured["SIGKILL of surehand worker, beat"] = measure_real_kills(
                    options.kills, server, tmp, admin_url, postgres=not options.no_postgres
                )
        finally:
            server.stop()
    model = {
        SCALED_NAME: analytic(SCALED, grid=False),
        DEFAULTS_NAME: analytic(DEFAULTS, grid=False),
        "defaults, on the Celery beat grid": analytic(DEFAULTS, grid=True),
    }
    for name, profile in profiles.items():
        console.rule(f"profile of one pass: {name}")
        console.print(profile, markup=False, highlight=False)
    if results:
        console.print(pass_table(results))
    console.print(detection_table(measured, model))
    save(options, results, measured, model, profiles)
    return 0


def save(
    options: argparse.Namespace,
    results: Sequence[PassResult],
    measured: dict[str, dict[str, Any]],
    model: dict[str, dict[str, float]],
    profiles: dict[str, str],
) -> None:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"reconcile-{stamp}.json"
    detection: dict[str, Any] = {
        "analytic": model,
        "model_bound_seconds": {"scaled": model_bound(SCALED), "defaults": model_bound(DEFAULTS)},
    }
    if "heartbeat stopped in-process" in measured:
        detection["measured_scaled"] = measured["heartbeat stopped in-process"]
    if "SIGKILL of surehand worker, beat" in measured:
        detection["measured_real_kills_scaled"] = measured["SIGKILL of surehand worker, beat"]
    out.write_text(
        json.dumps(
            {
                "bench": "reconcile",
                "at": stamp,
                "machine": {
                    "python": sys.version.split()[0],
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                },
                "options": vars(options),
                "live_lease_share": LIVE_SHARE,
                "pass_time": [asdict(r) for r in results],
                "detection": detection,
                "profiles": profiles,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    console.print(f"saved {out.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    raise SystemExit(main())
