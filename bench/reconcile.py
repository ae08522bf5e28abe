"""Benchmark the reconciler: pass time against running attempts, and loss detection latency.

    python bench/reconcile.py [--quick] [--passes N] [--no-postgres] [--sessions N]

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
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from private_redis import RedisServer  # bench/ is the script's directory
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, delete, insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from surehand.config import Settings
from surehand.dispatcher import diagnostics
from surehand.dispatcher.claims import claim
from surehand.dispatcher.reconciler import reconcile_loop
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket, CaseState
from surehand.queue.heartbeat import Heartbeat
from surehand.store import Store
from surehand.store import schema as tables

BENCH = Path(__file__).resolve().parent
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
        "holder": None,
        "held_until": None,
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
    stalled_count_ms: float  # the stalled-receipt count, run at most every 30 s


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
        started = time.perf_counter()
        diagnostics.count_stalled(sh.services)
        stalled_ms = (time.perf_counter() - started) * 1000
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
            stalled_count_ms=round(stalled_ms, 2),
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
def postgres_store(admin_url: str) -> Iterator[str]:
    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{PG_DATABASE}"'))
    try:
        yield make_url(admin_url).set(database=PG_DATABASE).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)'))
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
    latencies.sort()

    def pick(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    return {
        "sessions": sessions,
        "kills_spread_seconds": spread,
        "detected": len(latencies),
        "min": round(latencies[0], 3),
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": round(latencies[-1], 3),
        "mean": round(statistics.fmean(latencies), 3),
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
        "stalled count ms",
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
            f"{r.stalled_count_ms:.1f}",
        )
    return table


def min_running(results: Sequence[PassResult]) -> int:
    return min(r.running for r in results)


def detection_table(measured: dict[str, Any], model: dict[str, dict[str, float]]) -> Table:
    table = Table(title="detection latency, kill -> SESSION_LOST (seconds)")
    for column in ("settings", "source", "n", "min", "p50", "p90", "p99", "max", "mean"):
        table.add_column(column, justify="right")
    table.add_row(
        "scaled: TTL 1, hb 0.3, grace 0.5, every 0.5",
        "measured",
        str(measured["detected"]),
        *(f"{measured[k]:.3f}" for k in ("min", "p50", "p90", "p99", "max", "mean")),
    )
    for name, values in model.items():
        table.add_row(name, "analytic", "-", *(f"{values[k]:.2f}" for k in values))
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
    with tempfile.TemporaryDirectory(prefix="surehand-bench-reconcile-") as directory:
        tmp = Path(directory)
        server = RedisServer(tmp)
        try:
            results, profiles = run_pass_benchmarks(
                backends, configs, passes, server, tmp, admin_url
            )
            measured = measure_detection(
                options.sessions // scale or 20, options.spread / scale, server, tmp
            )
        finally:
            server.stop()
    model = {
        "scaled: TTL 1, hb 0.3, grace 0.5, every 0.5": analytic(SCALED, grid=False),
        "defaults: TTL 30, hb 10, grace 15, every 5": analytic(DEFAULTS, grid=False),
        "defaults, on the Celery beat grid": analytic(DEFAULTS, grid=True),
    }
    for name, profile in profiles.items():
        console.rule(f"profile of one pass: {name}")
        console.print(profile, markup=False, highlight=False)
    console.print(pass_table(results))
    console.print(detection_table(measured, model))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"reconcile-{stamp}.json"
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
                "detection": {"measured_scaled": measured, "analytic": model},
                "profiles": profiles,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    console.print(f"saved {out.relative_to(BENCH.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
