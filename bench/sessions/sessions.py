"""Benchmark agent sessions against plain Celery tasks on the same broker and worker count.

    python bench/sessions/sessions.py [--quick] [--rounds N] [--sessions N] [--plain N]
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
      ``bench/peers/dbos_worker.py``, each serving one DBOS queue with ``worker_concurrency`` =
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
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import exit_on_sigterm
from bench.common.results import save, utc_stamp
from bench.common.services import RedisServer, wait_for
from bench.sessions import sessions_costs as costs
from bench.sessions import sessions_tables as report
from bench.sessions import sessions_variants as kinds
from bench.sessions.sessions_tables import TARGETS, console
from bench.sessions.sessions_variants import SessionBackend, Variant
from surehand.store import schema as tables

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BASES = ("plain", "plain+conf", "floor", "celery+db", "dbos")


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
    idle = costs.idle_rates(redis_server)
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
                rates[variant.name] = costs.run_batch(variant, n, redis_server, idle)["per_second"]
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
    variants.append(kinds.plain_variant("plain", redis_server, tmp, options, "default"))
    variants.append(kinds.plain_variant("plain+conf", redis_server, tmp, options, "surehand"))
    variants.extend(kinds.session_variant(b, redis_server, tmp, options) for b in backends)
    for backend in backends:
        if backend.name == "postgres":
            variants.append(kinds.floor_variant(backend.url, redis_server, tmp, options))
            if not options.no_peers:
                variants.append(kinds.celery_db_variant(backend.url, redis_server, tmp, options))
                admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
                variants.append(kinds.dbos_variant(admin, tmp, options))


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


def main() -> int:
    options = parse_options()
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="surehand-bench-sessions-"))
    redis_server = RedisServer(tmp)
    variants: list[Variant] = []
    backends: list[SessionBackend] = []
    try:
        stores = [("sqlite", f"sqlite:///{tmp / 'bench.sqlite3'}", "DEV")]
        if not options.no_postgres:
            admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
            stores.append(("postgres", kinds.postgres_url(admin), "OPS"))
        count = WARMUP + options.rounds * options.sessions + options.profile
        for name, url, role in stores:
            backends.append(kinds.prepare_backend(name, url, role, count, redis_server.url(1)))
        with console.status("starting workers"):
            start_variants(variants, backends, redis_server, tmp, options)
        idle, per_round = measure_rounds(variants, redis_server, options)
        for variant in variants:
            for worker in variant.workers:
                worker.stop()
        profiles = {}
        for backend in backends:
            with console.status(f"profiling {options.profile} sessions on {backend.name}"):
                profiles[backend.name] = costs.profile_sessions(
                    backend, options.profile, redis_server
                )
        heartbeat = costs.heartbeat_cost(redis_server, options.leases, options.heartbeat_window)
        one_attempt = {b.name: _check_one_attempt_each(b) for b in backends}
    finally:
        for variant in variants:
            for worker in variant.workers:
                worker.stop()
        for backend in backends:
            backend.handle.close()
        redis_server.stop()

    summaries = [costs.summarise(v) for v in variants]
    ratios = ratios_of(summaries, per_round)
    by_round = ratios_by_round(per_round)
    console.print(report.throughput_table(summaries, ratios))
    console.print(report.rounds_table(by_round))
    console.print(report.commands_table(summaries))
    console.print(report.phases_table(profiles))
    console.print(report.heartbeat_table(heartbeat))
    report.print_verdicts(ratios)
    stamp = utc_stamp()
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
    save("sessions", result, stamp, sort_keys=True)
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
