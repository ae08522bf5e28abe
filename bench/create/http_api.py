"""Benchmark write_task through ``surehand api`` against a bare FastAPI insert on the same stack.

    python bench/create/http_api.py [--quick] [--rounds N] [--requests N] [--clients 8,32]

Two real server processes on loopback, each uvicorn in one process the way ``surehand api``
serves (``surehand.doors.serving``: access log off), on one Postgres database of the bench's own
(``surehand_bench_http``, or ``SUREHAND_BENCH_HTTP_DATABASE`` so that two runs on one server
do not share it; created empty; admin URL from ``SUREHAND_BENCH_DATABASE_URL``):

* ``surehand api`` (no tokens: loopback callers are local admins; its broker and leases on a
  private ``redis-server``), ``POST /v1/tasks`` with
  * ``create``: a new ``client_submission_id`` each request (201; the TASK is published);
  * ``reuse``: one of 64 ids created before the run (200, the first answer again);
* ``bare`` (``bench/create/http_bare.py``): a FastAPI endpoint parsing the same body and doing one
  INSERT+COMMIT of the row write_task stores, on a raw psycopg connection (201);
* with ``--unpublished``, ``unpublished``: creates as ``create``, on a third server
  (``bench/create/api_unpublished.py``, a database of its own) whose outbox publisher publishes
  nothing: how fast a create could answer with the publish in no thread of the API process
  (the upper bound of a publisher in another process);
* with ``--process``, ``process``: creates as ``create`` on a server with
  ``SUREHAND_API_PUBLISHER=process`` (its publisher a child process; a database of its own).

Clients: ``--clients`` (8 and 32) concurrent clients in this process (asyncio), each on its own
keep-alive connection, sending its next request when the last one answered. ``--client raw``
(the default) is a minimal HTTP/1.1 client (``RawConnection``, about 0.2 ms of CPU per request
here) so that the load generator takes as little of the 2 shared cores as it can;
``--client httpx`` uses ``httpx.AsyncClient`` instead. The variants run in interleaved rounds,
shuffled each round; ratios are taken within a round, the median across rounds is reported
with every round. Throughput and p50/p99 latency per variant, and the CPU time per request of
the server process (``/proc``) and of this one; any answer other than the expected status is
counted and reported. Results go to ``bench/results/http-<UTC>.json``. Not a test: nothing is
asserted about time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from sqlalchemy import func, select

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.databases import fresh_database, libpq
from bench.common.procs import (
    exit_on_sigterm,
    machine,
    versions,
)
from bench.common.results import save, utc_stamp
from bench.common.services import RedisServer
from bench.common.stats import nearest_rank
from bench.create.http_load import Batch, Server, run_batch, start_server
from bench.create.submit_backends import REQUEST, bare_table
from surehand.store import Store, outbox
from surehand.store.schema import tasks

HERE = Path(__file__).resolve().parent
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BENCH_DATABASE = os.environ.get("SUREHAND_BENCH_HTTP_DATABASE", "surehand_bench_http")
REUSE_IDS = 64
VARIANTS = ("bare", "create", "reuse")
SERVER_OF = {
    "bare": "bare",
    "create": "surehand",
    "reuse": "surehand",
    "unpublished": "unpublished",
    "process": "process",
}
TARGETS = {"create / bare": 0.6, "reuse / bare": 1.2}  # issue 13, at 8 clients
console = Console(width=None if sys.stdout.isatty() else 150)


def prepare_database(admin_url: str, suffix: str = "") -> str:
    name = BENCH_DATABASE + suffix
    url = fresh_database(admin_url, name).render_as_string(hide_password=False)
    store = Store(url, auto_upgrade=True)
    store.ensure_schema()
    bare_table(store)
    store.dispose()
    return url


def create_reuse_ids(base: str) -> list[str]:
    ids = [f"reuse-{uuid.uuid4().hex}" for _ in range(REUSE_IDS)]
    with httpx.Client(base_url=base, timeout=60) as client:
        for submission_id in ids:
            response = client.post(
                "/v1/tasks", json={**REQUEST, "client_submission_id": submission_id}
            )
            assert response.status_code == 201, response.text
    return ids


def measure(
    servers: dict[str, Server], options: argparse.Namespace, reuse_ids: list[str]
) -> list[dict[str, Any]]:
    """Every round: every clients count, the variants in a shuffled order."""
    rounds: list[dict[str, Any]] = []
    rng = random.Random(13)
    for number in range(options.rounds):
        for clients in options.clients:
            order = list(options.variants)
            rng.shuffle(order)
            measured: dict[str, Batch] = {}
            for variant in order:
                server = servers[SERVER_OF[variant]]
                with console.status(f"round {number + 1}: {variant}, {clients} clients"):
                    cpu, mine = server.cpu_seconds(), time.process_time()
                    measured[variant] = asyncio.run(
                        run_batch(
                            server.url(),
                            variant,
                            clients,
                            options.requests,
                            reuse_ids,
                            options.client,
                        )
                    )
                    measured[variant].server_cpu_seconds = server.cpu_seconds() - cpu
                    measured[variant].client_cpu_seconds = time.process_time() - mine
            rounds.append(
                {
                    "round": number + 1,
                    "clients": clients,
                    "order": order,
                    "variants": {
                        v: {
                            "requests": b.requests,
                            "per_second": round(b.per_second, 1),
                            "p50_ms": round(1000 * nearest_rank(b.latencies, 0.5), 2),
                            "p99_ms": round(1000 * nearest_rank(b.latencies, 0.99), 2),
                            "server_cpu_ms_per_request": round(
                                1000 * b.server_cpu_seconds / b.requests, 3
                            ),
                            "client_cpu_ms_per_request": round(
                                1000 * b.client_cpu_seconds / b.requests, 3
                            ),
                            "unexpected_status": b.unexpected,
                        }
                        for v, b in measured.items()
                    },
                    "ratios": {
                        "create / bare": measured["create"].per_second
                        / measured["bare"].per_second,
                        "reuse / bare": measured["reuse"].per_second / measured["bare"].per_second,
                        "reuse / create": measured["reuse"].per_second
                        / measured["create"].per_second,
                    }
                    | {
                        f"{extra} / bare": measured[extra].per_second / measured["bare"].per_second
                        for extra in ("unpublished", "process")
                        if extra in measured
                    },
                }
            )
            console.log(
                f"round {number + 1}, {clients} clients: "
                + ", ".join(f"{v} {b.per_second:.0f}/s" for v, b in measured.items())
            )
    return rounds


def publish_backlog(url: str, limit: float = 60.0) -> dict[str, Any]:
    """After the last batch: how many created TASKs still waited for their message (outbox
    rows, unpublished TASKs), and how long the server's publisher took to publish them all."""
    store = Store(url)
    started = time.perf_counter()
    try:
        while True:
            with store.snapshot() as connection:
                queued = outbox.pending(connection)
                unpublished = connection.execute(
                    select(func.count()).select_from(tasks).where(tasks.c.published.is_(False))
                ).scalar_one()
            waited = time.perf_counter() - started
            if (queued == 0 and unpublished == 0) or waited > limit:
                return {"outbox": queued, "unpublished": unpublished, "seconds": round(waited, 2)}
            time.sleep(0.05)
    finally:
        store.dispose()


def summarise(rounds: list[dict[str, Any]], clients: list[int]) -> list[dict[str, Any]]:
    rows = []
    for count in clients:
        mine = [r for r in rounds if r["clients"] == count]
        row: dict[str, Any] = {"clients": count, "variants": {}, "ratios": {}}
        for variant in mine[0]["variants"]:
            batches = [r["variants"][variant] for r in mine]
            row["variants"][variant] = {
                key: statistics.median(b[key] for b in batches)
                for key in (
                    "per_second",
                    "p50_ms",
                    "p99_ms",
                    "server_cpu_ms_per_request",
                    "client_cpu_ms_per_request",
                )
            } | {"unexpected_status": sum(sum(b["unexpected_status"].values()) for b in batches)}
        for name in mine[0]["ratios"]:
            values = [r["ratios"][name] for r in mine]
            target = TARGETS.get(name) if count == 8 else None
            row["ratios"][name] = {
                "median": round(statistics.median(values), 3),
                "by_round": [round(v, 3) for v in values],
                "target": target,
            }
        rows.append(row)
    return rows


def print_report(summary: list[dict[str, Any]]) -> None:
    table = Table(title="POST /v1/tasks: medians of rounds")
    columns = (
        *("clients", "variant", "req/s", "p50 ms", "p99 ms"),
        *("server CPU ms/req", "client CPU ms/req", "unexpected"),
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in summary:
        for variant, stats in row["variants"].items():
            table.add_row(
                str(row["clients"]),
                variant,
                f"{stats['per_second']:.0f}",
                f"{stats['p50_ms']:.1f}",
                f"{stats['p99_ms']:.1f}",
                f"{stats['server_cpu_ms_per_request']:.2f}",
                f"{stats['client_cpu_ms_per_request']:.2f}",
                str(stats["unexpected_status"]),
            )
    console.print(table)
    ratios = Table(title="Ratios of throughput, every round (each within one round)")
    for column in ("clients", "ratio", "by round", "median", "target"):
        ratios.add_column(column, justify="left" if column in ("ratio", "by round") else "right")
    for row in summary:
        for name, ratio in row["ratios"].items():
            target = ratio["target"]
            verdict = ""
            if target is not None:
                verdict = f">= {target:g} " + ("met" if ratio["median"] >= target else "MISSED")
            ratios.add_row(
                str(row["clients"]),
                name,
                " ".join(f"{v:.2f}" for v in ratio["by_round"]),
                f"{ratio['median']:.2f}",
                verdict,
            )
    console.print(ratios)


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 3)")
    parser.add_argument("--requests", type=int, help="requests per batch (default 640, quick 320)")
    parser.add_argument("--clients", default="8,32", help="concurrent clients, comma-separated")
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator: a minimal HTTP/1.1 client (default) or httpx.AsyncClient",
    )
    parser.add_argument(
        "--unpublished",
        action="store_true",
        help="also creates on an API whose publisher publishes nothing (api_unpublished.py)",
    )
    parser.add_argument(
        "--process",
        action="store_true",
        help="also creates on an API publishing from a child process (SUREHAND_API_PUBLISHER)",
    )
    options = parser.parse_args()
    parser_extra = [name for name in ("unpublished", "process") if getattr(options, name)]
    options.variants = [*VARIANTS, *parser_extra]
    options.rounds = options.rounds or (3 if options.quick else 5)
    options.requests = options.requests or (320 if options.quick else 640)
    options.clients = [int(c) for c in options.clients.split(",")]
    return options


def main() -> int:
    options = parse_options()
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="surehand-bench-http-"))
    redis_server = RedisServer(tmp)
    servers: dict[str, Server] = {}
    admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
    try:
        url = prepare_database(admin)
        with console.status("starting the servers"):
            servers["surehand"] = start_server(
                "surehand",
                [sys.executable, "-m", "surehand", "api", "--loglevel", "warning"],
                {
                    "SUREHAND_DATABASE_URL": url,
                    "SUREHAND_BROKER_URL": redis_server.url(0),
                    "SUREHAND_REDIS_URL": redis_server.url(1),
                },
                tmp,
            )
            servers["bare"] = start_server(
                "bare",
                [sys.executable, str(HERE / "http_bare.py"), "--loglevel", "warning"],
                {"BENCH_HTTP_DATABASE_URL": libpq(url)},
                tmp,
            )
            if options.unpublished:
                servers["unpublished"] = start_server(
                    "unpublished",
                    [
                        sys.executable,
                        str(HERE / "api_unpublished.py"),
                        "api",
                        "--loglevel",
                        "warning",
                    ],
                    {
                        "SUREHAND_DATABASE_URL": prepare_database(admin, "_unpublished"),
                        "SUREHAND_BROKER_URL": redis_server.url(2),
                        "SUREHAND_REDIS_URL": redis_server.url(3),
                    },
                    tmp,
                )
            if options.process:
                servers["process"] = start_server(
                    "process",
                    [sys.executable, "-m", "surehand", "api", "--loglevel", "warning"],
                    {
                        "SUREHAND_DATABASE_URL": prepare_database(admin, "_process"),
                        "SUREHAND_BROKER_URL": redis_server.url(4),
                        "SUREHAND_REDIS_URL": redis_server.url(5),
                        "SUREHAND_API_PUBLISHER": "process",
                    },
                    tmp,
                )
        reuse_ids = create_reuse_ids(servers["surehand"].url())
        for variant in options.variants:  # warm-up: thread pools, connections, caches
            base = servers[SERVER_OF[variant]].url()
            asyncio.run(
                run_batch(base, variant, max(options.clients), 64, reuse_ids, options.client)
            )
        rounds = measure(servers, options, reuse_ids)
        backlog = publish_backlog(url)
    finally:
        for server in servers.values():
            server.stop()
        redis_server.stop()
    summary = summarise(rounds, options.clients)
    print_report(summary)
    stamp = utc_stamp()
    document = {
        "benchmark": "http",
        "started_utc": stamp,
        "machine": machine(packages=versions("fastapi", "uvicorn", "httpx", "psycopg", "pydantic")),
        "settings": {
            "rounds": options.rounds,
            "requests_per_batch": options.requests,
            "clients": options.clients,
            "servers": (
                "one uvicorn process each (surehand.doors.serving, access log off, default loop "
                "and HTTP implementation), sync endpoints on FastAPI's thread pool"
            ),
            "targets_at_8_clients": TARGETS,
            "client": options.client,
        },
        "summary": summary,
        "publish_backlog_after_run": backlog,
        "rounds": rounds,
    }
    console.print(f"publish backlog after the last batch: {backlog}")
    save("http", document, stamp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
