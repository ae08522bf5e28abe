"""Where an HTTP create's server CPU goes: every thread of ``surehand api`` under cProfile.

    python bench/http_profile.py [--requests N] [--clients N] [--top N]

Starts ``surehand api`` through ``bench/profiled_api.py`` (each thread profiled by its own CPU
clock, ``time.thread_time``) on a private ``redis-server`` and a Postgres database of its own
(``surehand_bench_http_profile``), warms it up, then sends ``--requests`` creates
(``POST /v1/tasks``, a new ``client_submission_id`` each) from ``--clients`` keep-alive clients
(``bench/http_api.py``'s raw client) and waits until the outbox publisher has published them
all. Reports, per create: the CPU of each thread group (the event loop, the request threads,
the outbox publisher), the cumulative CPU of named steps (write_task, the drain, the publish,
Celery's send_task, the pipeline's round trip), and each group's functions by own CPU.
cProfile's own overhead inflates every number (about 2x here); the shares are what to read.
Saved to ``bench/results/http-profile-<UTC>.json``. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from databases import fresh_database  # noqa: E402
from http_api import RESULTS, publish_backlog, run_batch, start_server  # noqa: E402
from private_redis import RedisServer, wait_for  # noqa: E402
from procs import exit_on_sigterm, machine  # noqa: E402

from surehand.store import Store  # noqa: E402

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DATABASE = os.environ.get("SUREHAND_BENCH_HTTP_DATABASE", "surehand_bench_http") + "_profile"
# Steps named in the report: a function whose label ends with one of these (cumulative CPU).
STEPS = {
    "request: write_task": "(write_task)",
    "publisher: drain_outbox": "(drain_outbox)",
    "publisher: publish_sessions (batch)": "(publish_sessions)",
    "publisher: publish_session (one by one)": "(publish_session)",
    "publisher: Celery send_task": "(send_task)",
    "publisher: task-sent event": "dispatcher.py:119(publish)",
    "publisher: kombu maybe_declare": "common.py:110(maybe_declare)",
    "publisher: Redis pipeline round trip": "(_execute_pipeline)",
    "publisher: outbox take": "(take)",
    "publisher: batches (_publish_batch)": "(_publish_batch)",
    "publisher: set_published_many": "(set_published_many)",
}
console = Console(width=None if sys.stdout.isatty() else 150)
Dump = dict[str, dict[str, Any]]


def dump(process_pid: int, out: Path) -> Dump:
    """Ask the profiled server for its profiles (SIGUSR1) and read them."""
    out.unlink(missing_ok=True)
    os.kill(process_pid, signal.SIGUSR1)
    wait_for(lambda: out.exists() and out.stat().st_size > 0, 30, "the profile dump")
    time.sleep(0.2)  # the writer may still be writing
    document: Dump = json.loads(out.read_text(encoding="utf-8"))
    return document


def difference(before: Dump, after: Dump) -> Dump:
    """``after`` minus ``before``, per thread group and function."""
    result: Dump = {}
    for group, entry in after.items():
        was = before.get(group, {"functions": {}})["functions"]
        functions = {}
        for key, (own, cumulative, calls) in entry["functions"].items():
            old = was.get(key, (0.0, 0.0, 0))
            if calls - old[2] > 0:
                functions[key] = (own - old[0], cumulative - old[1], calls - old[2])
        # Less the dumps themselves (the signal handler runs on the event loop's thread).
        dumping = sum(c for k, (_, c, _) in functions.items() if k.endswith("(_dump)"))
        cpu = sum(own for own, _, _ in functions.values()) - dumping
        result[group] = {"threads": entry["threads"], "cpu_seconds": cpu, "functions": functions}
    return result


def steps(profile: Dump, creates: int) -> dict[str, dict[str, float]]:
    """Cumulative CPU ms per create of each named step (the outermost call's cumulative),
    and its calls per create."""
    found: dict[str, dict[str, float]] = {}
    for step, suffix in STEPS.items():
        total, calls = 0.0, 0
        for entry in profile.values():
            for key, (_, cumulative, count) in entry["functions"].items():
                if key.endswith(suffix) and cumulative > total:
                    total, calls = cumulative, count
        found[step] = {"ms": 1000 * total / creates, "calls": calls / creates}
    return found


def measure(options: argparse.Namespace, tmp: Path) -> tuple[Dump, float]:
    redis_server = RedisServer(tmp)
    url = fresh_database(options.admin, DATABASE).render_as_string(hide_password=False)
    store = Store(url, auto_upgrade=True)
    store.ensure_schema()
    store.dispose()
    out = tmp / "profile.json"
    try:
        server = start_server(
            "surehand",
            [
                sys.executable,
                str(BENCH / "profiled_api.py"),
                str(out),
                "api",
                "--loglevel",
                "warning",
            ],
            {
                "SUREHAND_DATABASE_URL": url,
                "SUREHAND_BROKER_URL": redis_server.url(0),
                "SUREHAND_REDIS_URL": redis_server.url(1),
            },
            tmp,
        )
    except BaseException:
        redis_server.stop()  # start_server stops nothing when the server never answers
        raise
    try:
        base = server.url()
        asyncio.run(run_batch(base, "create", options.clients, 200, []))  # warm-up
        publish_backlog(url)
        before = dump(server.process.pid, out)
        batch = asyncio.run(run_batch(base, "create", options.clients, options.requests, []))
        backlog = publish_backlog(url)
        after = dump(server.process.pid, out)
    finally:
        server.stop()
        redis_server.stop()
    console.print(f"{batch.requests} creates, {batch.per_second:.0f}/s; backlog {backlog}")
    return difference(before, after), batch.requests


def report(profile: Dump, creates: float, top: int) -> dict[str, Any]:
    groups = {name: 1000 * e["cpu_seconds"] / creates for name, e in profile.items()}
    table = Table(title="server CPU per create, by thread (cProfile, thread CPU clock)")
    table.add_column("thread")
    table.add_column("ms / create", justify="right")
    for name, ms in sorted(groups.items(), key=lambda item: -item[1]):
        table.add_row(name, f"{ms:.3f}")
    table.add_row("all", f"{sum(groups.values()):.3f}")
    console.print(table)
    named = steps(profile, int(creates))
    table = Table(title="named steps, cumulative CPU ms per create")
    table.add_column("step")
    table.add_column("ms / create", justify="right")
    table.add_column("calls / create", justify="right")
    for step, value in named.items():
        table.add_row(step, f"{value['ms']:.3f}", f"{value['calls']:.3f}")
    console.print(table)
    tops: dict[str, list[dict[str, Any]]] = {}
    for name, entry in profile.items():
        rows = sorted(entry["functions"].items(), key=lambda item: -item[1][0])[:top]
        tops[name] = [
            {
                "function": key,
                "own_ms": 1000 * own / creates,
                "cumulative_ms": 1000 * cum / creates,
                "calls": calls,
            }
            for key, (own, cum, calls) in rows
        ]
        table = Table(title=f"{name}: functions by own CPU, ms per create")
        for column in ("function", "own", "cumulative", "calls"):
            table.add_column(column)
        for row in tops[name]:
            table.add_row(
                row["function"],
                f"{row['own_ms']:.3f}",
                f"{row['cumulative_ms']:.3f}",
                str(row["calls"]),
            )
        console.print(table)
    return {"threads_ms_per_create": groups, "steps_ms_per_create": named, "top": tops}


def tree() -> str:
    """The profiled tree and its commit (the server imports this tree's surehand)."""
    head = subprocess.run(
        ["git", "-C", str(BENCH.parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{BENCH.parent} at {head.stdout.strip() or 'unknown'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1600)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--top", type=int, default=25)
    options = parser.parse_args()
    options.admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
    exit_on_sigterm()
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="surehand-bench-http-profile-"))
    started = os.getloadavg()
    profile, creates = measure(options, tmp)
    summary = report(profile, creates, options.top)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    document = {
        "benchmark": "http-profile",
        "at": stamp,
        "tree": tree(),
        "machine": machine(),
        "load_average": {"start": started, "end": os.getloadavg()},
        "options": {k: v for k, v in vars(options).items() if k != "admin"},
        "creates": creates,
        **summary,
    }
    path = RESULTS / f"http-profile-{stamp}.json"
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    console.print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
