"""Benchmark write_task against a bare INSERT+COMMIT of the same row, on SQLite and Postgres.

    python bench/submit.py [--quick] [--rounds N] [--ops N] [--convergence-rounds N]

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
import contextlib
import json
import os
import platform
import queue
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy
from databases import fresh_database, libpq  # bench/ is the script's directory
from psycopg.types.json import Json
from rich.console import Console
from rich.table import Table
from sqlalchemy import JSON, Column, MetaData, create_engine, insert, text
from sqlalchemy import Table as SqlTable
from sqlalchemy.engine import make_url
from store_counts import ASYNC_COMMIT, counted

from surehand.clock import SystemClock
from surehand.config import Settings
from surehand.digest import request_digest, sha256_hex
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.fcop.render import render_task
from surehand.model import DIGEST_SCHEMA_VERSION, Bucket
from surehand.requests import parse_task_request
from surehand.store import Store
from surehand.store.schema import metadata, tasks

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BENCH_DATABASE = "surehand_bench"
DBOS_DATABASE = "surehand_bench_dbos_submit"
TENANT = "bench"
REQUEST: dict[str, Any] = {
    "sender": "PM",
    "recipient": "DEV",
    "subject": "Fix the login redirect after a password reset",
    "body": "Users who reset their password land on a blank page.\n" * 8,
    "priority": "high",
    "references": ["spec:auth", "incident:4411"],
    "risk_level": "medium",
}
VARIANTS = ("bare", "create", "reuse")
POSTGRES_VARIANTS = ("bare/driver",)
DBOS_VARIANTS = ("dbos start", "dbos replay", "dbos enqueue")
CREATE_TARGET = 0.5  # create >= 0.5x bare
REUSE_TARGET = 1.0  # reuse >= 1x bare
# (numerator, denominator, target or None): every ratio taken within a round when both ran.
RATIOS: tuple[tuple[str, str, float | None], ...] = (
    ("create", "bare", CREATE_TARGET),
    ("reuse", "bare", REUSE_TARGET),
    ("create", "bare/driver", 0.6),  # issue 13, 1 client on Postgres
    ("reuse", "bare/driver", None),
    ("create", "dbos start", 5.0),  # issue 13
    ("create", "dbos enqueue", None),
    ("reuse", "dbos replay", None),
    ("bare", "bare/driver", None),
)
CONVERGE_CALLERS = 64


# -- databases --------------------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    store: Store
    services: Services
    bare: SqlTable
    bare_row: dict[str, Any]
    reuse_ids: list[str]
    variants: tuple[str, ...] = VARIANTS
    driver: queue.Queue[psycopg.Connection[Any]] | None = None
    driver_sql: str = ""
    dbos_replay_ids: list[str] | None = None


def postgres_url(admin_url: str) -> str:
    """Create the bench database if needed (as tests/conftest.py does per worker)."""
    parsed = make_url(admin_url)
    admin = create_engine(parsed, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        exists = connection.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": BENCH_DATABASE}
        ).first()
        if not exists:
            connection.execute(text(f'CREATE DATABASE "{BENCH_DATABASE}"'))
    admin.dispose()
    return parsed.set(database=BENCH_DATABASE).render_as_string(hide_password=False)


BARE_TABLE = "bench_bare_tasks"


def bare_columns() -> list[Column[Any]]:
    """The columns (and primary key) of ``tasks``, for a scratch table."""
    return [
        Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
        for c in tasks.columns
    ]


def bare_table(store: Store) -> SqlTable:
    """A scratch table with the columns (and primary key) of ``tasks``, created empty."""
    table = SqlTable(BARE_TABLE, MetaData(), *bare_columns())
    table.drop(store.engine, checkfirst=True)
    table.create(store.engine)
    return table


def empty(store: Store) -> None:
    with store.engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


def row_like_write_task() -> dict[str, Any]:
    """The column values write_task stores for REQUEST (task_id filled in per insert)."""
    fields = parse_task_request(REQUEST).to_fields()
    now = datetime.now(UTC)
    document = render_task("TASK-20260101-001", fields, created_at=now, submission_id="sub-x")
    return {
        "tenant": TENANT,
        **fields.semantic_dict(),
        "bucket": Bucket.INBOX.value,
        "revision": 1,
        "epoch": 0,
        "rework_round": 0,
        "client_submission_id": "bench-" + uuid.uuid4().hex,
        "request_digest": request_digest(fields),
        "digest_schema_version": DIGEST_SCHEMA_VERSION,
        "idempotent": True,
        "document": document,
        "document_digest": sha256_hex(document),
        "published": False,
        "created_at": now,
        "updated_at": now,
    }


def open_driver(backend: Backend, connections: int) -> None:
    """Raw psycopg connections (not autocommit: INSERT, then COMMIT) for ``bare/driver``."""
    backend.driver = queue.Queue()
    for _ in range(connections):
        backend.driver.put(psycopg.connect(libpq(backend.store.engine.url)))
    backend.driver_sql = driver_insert_sql(list(backend.bare.columns))
    backend.variants += POSTGRES_VARIANTS


def driver_insert_sql(columns: list[Column[Any]]) -> str:
    """The bare INSERT of one row into the scratch table, in psycopg's placeholders."""
    names = ", ".join('"' + c.name + '"' for c in columns)
    return f"INSERT INTO {BARE_TABLE} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"


def driver_values(columns: list[Column[Any]], row: dict[str, Any]) -> list[Any]:
    """``row`` in column order, JSON columns wrapped for the driver."""
    return [Json(row.get(c.name)) if isinstance(c.type, JSON) else row.get(c.name) for c in columns]


def close_driver(backend: Backend) -> None:
    while backend.driver is not None and not backend.driver.empty():
        backend.driver.get().close()


def open_backend(name: str, url: str, reuse_pool: int) -> Backend:
    store = Store(url, auto_upgrade=True)
    store.ensure_schema()
    empty(store)
    services = Services(
        store=store,
        settings=Settings(),
        clock=SystemClock(),
    )
    backend = Backend(name, store, services, bare_table(store), row_like_write_task(), [])
    for _ in range(reuse_pool):
        submission_id = new_id()
        write_task(services, {**REQUEST, "client_submission_id": submission_id}, tenant=TENANT)
        backend.reuse_ids.append(submission_id)
    return backend


def new_id() -> str:
    return "b-" + uuid.uuid4().hex


# -- one operation of each variant ------------------------------------------------------------


def op_bare(backend: Backend, _index: int) -> None:
    row = {**backend.bare_row, "task_id": "BARE-" + uuid.uuid4().hex[:24]}
    with backend.store.transaction() as connection:
        connection.execute(insert(backend.bare).values(**row))


def op_bare_driver(backend: Backend, _index: int) -> None:
    assert backend.driver is not None
    connection = backend.driver.get()
    try:
        row = {**backend.bare_row, "task_id": "BARE-" + uuid.uuid4().hex[:24]}
        params = driver_values(list(backend.bare.columns), row)
        connection.execute(backend.driver_sql, params)
        connection.commit()
    finally:
        backend.driver.put(connection)


def op_create(backend: Backend, _index: int) -> None:
    result = write_task(
        backend.services, {**REQUEST, "client_submission_id": new_id()}, tenant=TENANT
    )
    assert result.action_taken, result


def op_reuse(backend: Backend, index: int) -> None:
    submission_id = backend.reuse_ids[index % len(backend.reuse_ids)]
    result = write_task(
        backend.services, {**REQUEST, "client_submission_id": submission_id}, tenant=TENANT
    )
    assert not result.action_taken, result


def op_dbos_start(_backend: Backend, _index: int) -> None:
    from bench_dbos import start

    start(new_id(), REQUEST)


def op_dbos_replay(backend: Backend, index: int) -> None:
    from bench_dbos import start

    assert backend.dbos_replay_ids
    start(backend.dbos_replay_ids[index % len(backend.dbos_replay_ids)], REQUEST)


def op_dbos_enqueue(_backend: Backend, _index: int) -> None:
    from bench_dbos import enqueue

    enqueue(new_id(), REQUEST)


OPERATIONS: dict[str, Callable[[Backend, int], None]] = {
    "bare": op_bare,
    "create": op_create,
    "reuse": op_reuse,
    "bare/driver": op_bare_driver,
    "dbos start": op_dbos_start,
    "dbos replay": op_dbos_replay,
    "dbos enqueue": op_dbos_enqueue,
}


def throughput(backend: Backend, variant: str, clients: int, ops: int) -> float:
    """ops/s of ``ops`` operations spread over ``clients`` threads started together."""
    operation = OPERATIONS[variant]
    per_client = max(1, ops // clients)
    if clients == 1:
        started = time.perf_counter()
        for i in range(per_client):
            operation(backend, i)
        return per_client / (time.perf_counter() - started)
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def client(offset: int) -> None:
        barrier.wait()
        try:
            for i in range(per_client):
                operation(backend, offset * per_client + i)
        except BaseException as error:  # report, don't hang the barrier
            errors.append(error)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return per_client * clients / elapsed


# -- 64-way convergence -----------------------------------------------------------------------


def converge_round(backend: Backend) -> tuple[list[float], Counter[str]]:
    """64 threads, one new id, released together; each one's latency to its answer."""
    submission_id = new_id()
    data = {**REQUEST, "client_submission_id": submission_id}
    barrier = threading.Barrier(CONVERGE_CALLERS)
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def caller() -> None:
        barrier.wait()
        started = time.perf_counter()
        result = write_task(backend.services, data, tenant=TENANT)
        elapsed = time.perf_counter() - started
        with lock:
            latencies.append(elapsed)
            outcomes[result.disposition.value] += 1

    threads = [threading.Thread(target=caller) for _ in range(CONVERGE_CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, outcomes


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# -- profile ----------------------------------------------------------------------------------


def profile(backend: Backend, ops: int) -> dict[str, dict[str, float]]:
    """Per-operation counts for each variant (single client)."""
    report: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:  # the store's own variants (the others do not use it)
        with counted(backend.store) as seen:
            for i in range(ops):
                OPERATIONS[variant](backend, i)
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
    fields = parse_task_request(REQUEST).to_fields()

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


Rates = dict[tuple[str, int, str], list[float]]
CLIENTS = (1, 8)


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
            for clients in CLIENTS:
                order = list(backend.variants)
                rng.shuffle(order)
                status.update(f"round {number + 1}/{rounds}: {backend.name}, {clients} clients")
                measured = {v: throughput(backend, v, clients, ops) for v in order}
                for variant, rate in measured.items():
                    rates.setdefault((backend.name, clients, variant), []).append(rate)
                for top, bottom, _target in RATIOS:
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
        anomalies += seen != Counter({"created": 1, "reused": CONVERGE_CALLERS - 1})
    return {
        "rounds": rounds,
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
        "slowest_caller_p50_ms": round(statistics.median(slowest) * 1000, 2),
        "outcomes": dict(outcomes),
        "rounds_not_1_created_63_reused": anomalies,
    }


def summarize(backends: list[Backend], rates: Rates, ratios: Rates) -> list[dict[str, Any]]:
    rows = []
    for backend in backends:
        for clients in CLIENTS:
            key = (backend.name, clients)
            rate = {v: statistics.median(rates[(*key, v)]) for v in backend.variants}
            create_ratio = statistics.median(ratios[(*key, "create / bare")])
            reuse_ratio = statistics.median(ratios[(*key, "reuse / bare")])
            reuse_create = [
                r / c for r, c in zip(rates[(*key, "reuse")], rates[(*key, "create")], strict=True)
            ]
            rows.append(
                {
                    "database": backend.name,
                    "clients": clients,
                    "bare_ops_s": round(rate["bare"], 1),
                    "create_ops_s": round(rate["create"], 1),
                    "reuse_ops_s": round(rate["reuse"], 1),
                    "create_over_bare": round(create_ratio, 3),
                    "reuse_over_bare": round(reuse_ratio, 3),
                    "reuse_over_create": round(statistics.median(reuse_create), 3),
                    "create_target_met": create_ratio >= CREATE_TARGET,
                    "reuse_target_met": reuse_ratio >= REUSE_TARGET,
                    "create_over_bare_by_round": [
                        round(r, 3) for r in ratios[(*key, "create / bare")]
                    ],
                    "reuse_over_bare_by_round": [
                        round(r, 3) for r in ratios[(*key, "reuse / bare")]
                    ],
                    "ops_s": {v: round(r, 1) for v, r in rate.items()},
                    "ops_s_by_round": {
                        v: [round(r, 1) for r in rates[(*key, v)]] for v in backend.variants
                    },
                    "ratios": {
                        name: {
                            "median": round(statistics.median(ratios[(*key, name)]), 3),
                            "by_round": [round(r, 3) for r in ratios[(*key, name)]],
                            "target": target,
                        }
                        for top, bottom, target in RATIOS
                        if (*key, name := f"{top} / {bottom}") in ratios
                    },
                }
            )
    return rows


def print_ratio_tables(console: Console, document: dict[str, Any]) -> None:
    every = Table(title="Every ratio, every round (each taken within one round)")
    for column in ("database", "clients", "ratio", "by round", "median", "target"):
        every.add_column(column, justify="left" if column in ("ratio", "by round") else "right")
    for row in document["throughput"]:
        for name, ratio in row["ratios"].items():
            target = ratio["target"]
            every.add_row(
                row["database"],
                str(row["clients"]),
                name,
                " ".join(f"{r:.2f}" for r in ratio["by_round"]),
                f"{ratio['median']:.2f}",
                ""
                if target is None
                else f">= {target:g}" + (" met" if ratio["median"] >= target else " MISSED"),
            )
    console.print(every)
    rates = Table(title="ops/s, median of rounds")
    for column in ("database", "clients", "variant", "ops/s", "by round"):
        rates.add_column(column, justify="left" if column in ("variant", "by round") else "right")
    for row in document["throughput"]:
        for variant, rate in row["ops_s"].items():
            rates.add_row(
                row["database"],
                str(row["clients"]),
                variant,
                f"{rate:.0f}",
                " ".join(f"{r:.0f}" for r in row["ops_s_by_round"][variant]),
            )
    console.print(rates)


def print_report(console: Console, title: str, document: dict[str, Any]) -> None:
    table = Table(title=title)
    columns = ("database", "clients", "bare ops/s", "create ops/s", "reuse ops/s")
    ratio_columns = ("create/bare", "reuse/bare", "reuse/create")
    targets = (f"create>={CREATE_TARGET}x", f"reuse>={REUSE_TARGET}x")
    for column in (*columns, *ratio_columns, *targets):
        table.add_column(column, justify="right")
    for row in document["throughput"]:
        table.add_row(
            row["database"],
            str(row["clients"]),
            *(f"{row[k]:.0f}" for k in ("bare_ops_s", "create_ops_s", "reuse_ops_s")),
            *(
                f"{row[k]:.2f}"
                for k in ("create_over_bare", "reuse_over_bare", "reuse_over_create")
            ),
            *("yes" if row[k] else "NO" for k in ("create_target_met", "reuse_target_met")),
        )
    console.print(table)

    print_ratio_tables(console, document)

    converge = Table(title=f"{CONVERGE_CALLERS} callers, one id, released by a barrier")
    for column in ("database", "rounds", "p50 ms", "p99 ms", "max ms", "slowest p50 ms", "bad"):
        converge.add_column(column, justify="right")
    for name, stats in document["convergence_64"].items():
        converge.add_row(
            name,
            str(stats["rounds"]),
            *(f"{stats[k]:.1f}" for k in ("p50_ms", "p99_ms", "max_ms", "slowest_caller_p50_ms")),
            str(stats["rounds_not_1_created_63_reused"]),
        )
    console.print(converge)

    profiled = Table(title="per operation (single client, on every engine of the store)")
    for column in (
        *("database", "variant", "statements", "commits", "async-engine stmts", "rollbacks"),
        "checkouts",
    ):
        profiled.add_column(column, justify="right")
    for name, report in document["profile_per_op"].items():
        for variant, seen in report.items():
            profiled.add_row(
                name,
                variant,
                *(
                    f"{seen.get(k, 0):.2f}"
                    for k in ("statements", "commits", "async-engine stmts", "rollbacks")
                ),
                f"{seen.get('checkouts', 0):.2f}",
            )
    console.print(profiled)
    for name, costs in document["unit_costs"].items():
        console.print(
            f"{name}: empty transaction {costs['empty_transaction_ms']:.2f} ms, "
            f"+ one trivial statement {costs['one_trivial_statement_ms']:.2f} ms, "
            f"TASK document render (YAML) {costs['render_task_document_ms']:.2f} ms"
        )


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
    backends = [open_backend("sqlite", f"sqlite:///{scratch.name}/bench.sqlite3", 64)]
    if not args.no_postgres:
        admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
        postgres = open_backend("postgres", postgres_url(admin), 64)
        backends.append(postgres)
        open_driver(postgres, max(CLIENTS))
        if not args.no_dbos and _has_dbos():
            from bench_dbos import launch

            system_database = libpq(fresh_database(admin, DBOS_DATABASE))
            postgres.dbos_replay_ids = launch(system_database, REQUEST, 64)
            postgres.variants += DBOS_VARIANTS
    for backend in backends:  # warm up every path (connections, statement caches)
        for variant in backend.variants:
            throughput(backend, variant, 1, 10)

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
    info["packages"] = _versions("psycopg", "dbos", "celery")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    document = {
        "benchmark": "submit",
        "started_utc": stamp,
        "seconds": round(elapsed, 1),
        "settings": {
            "rounds": rounds,
            "ops_per_variant_per_round": ops,
            "convergence_rounds": converge_rounds,
            "quick": args.quick,
            "targets": {"create_over_bare": CREATE_TARGET, "reuse_over_bare": REUSE_TARGET},
            "ratio_targets": {f"{a} / {b}": t for a, b, t in RATIOS if t is not None},
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
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"submit-{stamp}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"saved bench/results/{path.name} ({elapsed:.0f} s measured)")
    for backend in backends:
        close_driver(backend)
        if backend.name == "postgres":
            backend.bare.drop(backend.store.engine, checkfirst=True)
        backend.store.dispose()
    if any(b.dbos_replay_ids for b in backends):
        from bench_dbos import shutdown

        shutdown()
    scratch.cleanup()
    return 0


def _has_dbos() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def _versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
