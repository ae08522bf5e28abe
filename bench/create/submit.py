"""Benchmark write_task against a bare INSERT+COMMIT of the same row, on SQLite and Postgres.

    python bench/create/submit.py [--quick] [--rounds N] [--ops N] [--convergence-rounds N]

Side by side in one run, on a temporary SQLite file and on Postgres (the admin URL comes from
``SUREHAND_BENCH_DATABASE_URL``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``;
the bench works in its own database ``surehand_bench``, created and migrated here and emptied
at the start of each run), with 1 and 8 client threads:

(a) ``write_task`` with a new submission id (create) vs a bare single-row INSERT+COMMIT of the
    same row into a scratch table with the columns of ``tasks``, on the same database;
(b) a retry of a committed id (reuse) vs create;
(c) 64 threads with one id released by a barrier: latency to the answer, p50 and p99.

On Postgres, in the same rounds:

* ``bare/driver``: the strict bare, one INSERT+COMMIT of the same row on a raw psycopg
  connection (no SQLAlchemy; connections handed out by a ``queue.Queue``, one per client);
* ``dbos start``: a DBOS workflow started under a key (``SetWorkflowID`` with a new id) and run
  to its end: it takes the request as its input and has one step that returns a TASK id
  (DBOS 3.4, launched in this process, system database ``surehand_bench_dbos_submit`` on the
  same Postgres). It records less than write_task does (no application row, no document);
* ``dbos replay``: the same call under an id that already finished (DBOS returns the recorded
  result without running anything), the counterpart of reuse;
* ``dbos enqueue``: a keyed enqueue of that workflow (``SetWorkflowID`` +
  ``DBOS.enqueue_workflow``) on a queue nobody serves: only the durable record of the work,
  the nearest DBOS counterpart of create (which records the TASK and publishes it).

DBOS is optional (``pip install -e '.[bench]'``); without it, or with ``--no-dbos``, those
variants are left out.

The variants of (a) and (b) are interleaved in rounds (in a shuffled order each round) so that
they share the machine's noise; each ratio is taken within a round, and the median across
rounds is reported. A profile pass counts statements, transactions and connection checkouts
per operation. Results are printed as tables and saved to ``bench/results/submit-<UTC>.json``.
This is a benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy
from rich.console import Console
from sqlalchemy import text

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.databases import fresh_database, libpq
from bench.common.procs import versions
from bench.common.results import save, utc_stamp
from bench.common.stats import nearest_rank
from bench.common.store_counts import ASYNC_COMMIT, counted
from bench.create import submit_backends as variants
from bench.create.submit_backends import Backend, Rates
from bench.create.submit_report import print_report, summarize
from surehand.dispatcher.submissions import write_task
from surehand.fcop.render import render_task
from surehand.requests import parse_task_request

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DBOS_DATABASE = "surehand_bench_dbos_submit"


# -- 64-way convergence -----------------------------------------------------------------------


def converge_round(backend: Backend) -> tuple[list[float], Counter[str]]:
    """64 threads, one new id, released together; each one's latency to its answer."""
    submission_id = variants.new_id()
    data = {**variants.REQUEST, "client_submission_id": submission_id}
    barrier = threading.Barrier(variants.CONVERGE_CALLERS)
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def caller() -> None:
        barrier.wait()
        started = time.perf_counter()
        result = write_task(backend.services, data, tenant=variants.TENANT)
        elapsed = time.perf_counter() - started
        with lock:
            latencies.append(elapsed)
            outcomes[result.disposition.value] += 1

    threads = [threading.Thread(target=caller) for _ in range(variants.CONVERGE_CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, outcomes


# -- profile ----------------------------------------------------------------------------------


def profile(backend: Backend, ops: int) -> dict[str, dict[str, float]]:
    """Per-operation counts for each variant (single client)."""
    report: dict[str, dict[str, float]] = {}
    for variant in variants.VARIANTS:  # the store's own variants (the others do not use it)
        with counted(backend.store) as seen:
            for i in range(ops):
                variants.OPERATIONS[variant](backend, i)
        totals = {
            "statements": seen.statements.total(),
            "commits": seen.durable.total() - seen.durable[ASYNC_COMMIT],
            "async-engine stmts": seen.durable[ASYNC_COMMIT],
            "rollbacks": seen.rollbacks,
            "checkouts": seen.checkouts,
        }
        report[variant] = {key: round(value / ops, 2) for key, value in totals.items()}
    return report


def unit_costs(backend: Backend, ops: int) -> dict[str, float]:
    """Milliseconds for the pieces a create is made of, to see what dominates."""
    fields = parse_task_request(variants.REQUEST).to_fields()

    def timed(action: Callable[[], None]) -> float:
        started = time.perf_counter()
        for _ in range(ops):
            action()
        return round((time.perf_counter() - started) / ops * 1000, 3)

    def empty_transaction() -> None:
        with backend.store.transaction():
            pass

    def one_statement() -> None:
        with backend.store.transaction() as connection:
            connection.execute(text("SELECT 1"))

    def render() -> None:
        render_task("TASK-20260101-001", fields, created_at=datetime.now(UTC), submission_id="s")

    empty_ms = timed(empty_transaction)
    return {
        "empty_transaction_ms": empty_ms,
        "one_trivial_statement_ms": round(timed(one_statement) - empty_ms, 3),
        "render_task_document_ms": timed(render),
    }


# -- the run ----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "sqlalchemy": sqlalchemy.__version__,
        "sqlite": __import__("sqlite3").sqlite_version,
    }


def server_version(backend: Backend) -> str:
    with backend.store.engine.connect() as connection:
        if backend.name == "postgres":
            return str(connection.execute(text("SHOW server_version")).scalar_one())
        return str(connection.execute(text("SELECT sqlite_version()")).scalar_one())


def measure_throughput(
    backends: list[Backend], rounds: int, ops: int, status: Any
) -> tuple[Rates, Rates]:
    """ops/s of each variant, and every ratio of RATIOS taken within each round (keyed by
    ``(database, clients, "numerator / denominator")``)."""
    rates: Rates = {}
    ratios: Rates = {}
    rng = random.Random(1)
    for number in range(rounds):
        for backend in backends:
            for clients in variants.CLIENTS:
                order = list(backend.variants)
                rng.shuffle(order)
                status.update(f"round {number + 1}/{rounds}: {backend.name}, {clients} clients")
                measured = {v: variants.throughput(backend, v, clients, ops) for v in order}
                for variant, rate in measured.items():
                    rates.setdefault((backend.name, clients, variant), []).append(rate)
                for top, bottom, _target in variants.RATIOS:
                    if top in measured and bottom in measured:
                        ratios.setdefault((backend.name, clients, f"{top} / {bottom}"), []).append(
                            measured[top] / measured[bottom]
                        )
    return rates, ratios


def measure_convergence(backend: Backend, rounds: int, status: Any) -> dict[str, Any]:
    latencies: list[float] = []
    slowest: list[float] = []
    outcomes: Counter[str] = Counter()
    anomalies = 0
    for number in range(rounds):
        status.update(f"64-way convergence {number + 1}/{rounds}: {backend.name}")
        lat, seen = converge_round(backend)
        latencies += lat
        slowest.append(max(lat))
        outcomes += seen
        anomalies += seen != Counter({"created": 1, "reused": variants.CONVERGE_CALLERS - 1})
    return {
        "rounds": rounds,
        "p50_ms": round(nearest_rank(latencies, 0.50) * 1000, 2),
        "p99_ms": round(nearest_rank(latencies, 0.99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
        "slowest_caller_p50_ms": round(statistics.median(slowest) * 1000, 2),
        "outcomes": dict(outcomes),
        "rounds_not_1_created_63_reused": anomalies,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 8, quick 3)")
    parser.add_argument("--ops", type=int, help="operations per variant per round")
    parser.add_argument("--convergence-rounds", type=int, help="64-way rounds per database")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--no-dbos", action="store_true", help="without the DBOS variants")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 8)
    ops = args.ops or (80 if args.quick else 240)
    converge_rounds = args.convergence_rounds or (4 if args.quick else 15)
    console = Console(width=150)

    scratch = tempfile.TemporaryDirectory(prefix="surehand-bench-")
    backends = [variants.open_backend("sqlite", f"sqlite:///{scratch.name}/bench.sqlite3", 64)]
    if not args.no_postgres:
        admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
        postgres = variants.open_backend("postgres", variants.postgres_url(admin), 64)
        backends.append(postgres)
        variants.open_driver(postgres, max(variants.CLIENTS))
        if not args.no_dbos and _has_dbos():
            from bench.peers.dbos_submit import launch

            system_database = libpq(fresh_database(admin, DBOS_DATABASE))
            postgres.dbos_replay_ids = launch(system_database, variants.REQUEST, 64)
            postgres.variants += variants.DBOS_VARIANTS
    for backend in backends:  # warm up every path (connections, statement caches)
        for variant in backend.variants:
            variants.throughput(backend, variant, 1, 10)

    started = time.perf_counter()
    with console.status("measuring") as status:
        rates, ratios = measure_throughput(backends, rounds, ops, status)
        convergence = {b.name: measure_convergence(b, converge_rounds, status) for b in backends}
        status.update("profiling statements per operation")
        profiles = {backend.name: profile(backend, 40) for backend in backends}
        units = {backend.name: unit_costs(backend, 200) for backend in backends}
    elapsed = time.perf_counter() - started

    info = machine()
    info["servers"] = {backend.name: server_version(backend) for backend in backends}
    info["load_average_at_end"] = list(os.getloadavg())
    info["packages"] = versions("psycopg", "dbos", "celery")
    stamp = utc_stamp()
    document = {
        "benchmark": "submit",
        "started_utc": stamp,
        "seconds": round(elapsed, 1),
        "settings": {
            "rounds": rounds,
            "ops_per_variant_per_round": ops,
            "convergence_rounds": converge_rounds,
            "quick": args.quick,
            "targets": {
                "create_over_bare": variants.CREATE_TARGET,
                "reuse_over_bare": variants.REUSE_TARGET,
            },
            "ratio_targets": {f"{a} / {b}": t for a, b, t in variants.RATIOS if t is not None},
            "variants": {b.name: list(b.variants) for b in backends},
        },
        "machine": info,
        "throughput": summarize(backends, rates, ratios),
        "convergence_64": convergence,
        "profile_per_op": profiles,
        "unit_costs": units,
    }
    print_report(
        console, f"write_task vs bare INSERT+COMMIT ({rounds} rounds x {ops} ops)", document
    )
    save("submit", document, stamp)
    console.print(f"({elapsed:.0f} s measured)")
    for backend in backends:
        variants.close_driver(backend)
        if backend.name == "postgres":
            backend.bare.drop(backend.store.engine, checkfirst=True)
        backend.store.dispose()
    if any(b.dbos_replay_ids for b in backends):
        from bench.peers.dbos_submit import shutdown

        shutdown()
    scratch.cleanup()
    return 0


def _has_dbos() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
