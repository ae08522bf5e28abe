"""Part (a) of ``reconcile.py``: a reconciler pass's time against N running attempts (1 % of
them without a live lease), on SQLite and Postgres, after seeding a store with finished TASKs
and running ones."""

from __future__ import annotations

import cProfile
import io
import pstats
import shutil
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from sqlalchemy import create_engine, delete, insert, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from bench.common.seeding import seeded_task
from bench.common.services import RedisServer
from surehand.config import Settings
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket, CaseState
from surehand.store import Store
from surehand.store import schema as tables

PG_DATABASE = "surehand_bench_reconcile"


LIVE_SHARE = 0.99


CASE_SHARE = 0.02


BATCH = 5000
T0 = datetime(2026, 11, 1, tzinfo=UTC)
console = Console(width=max(120, shutil.get_terminal_size((120, 40)).columns))


def task_row(task_id: str, bucket: Bucket, epoch: int) -> dict[str, Any]:
    return seeded_task(
        task_id=task_id,
        tenant="bench",
        recipient="DEV",
        subject=f"Bench {task_id}",
        body="Seeded for the reconciler benchmark.",
        priority="P2",
        bucket=bucket.value,
        revision=1 + 2 * epoch,
        epoch=epoch,
        client_submission_id=f"sub-{task_id}",
        document="---\n---\n",
        created_at=T0,
        updated_at=T0,
    )


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
