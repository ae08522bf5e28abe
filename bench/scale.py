"""Start latency of ``surehand up`` (before and after), and many long sessions in one worker.

    python bench/scale.py [--quick] [--probes N] [--rate R] [--window S] [--sessions 100,1000]
                          [--hold S] [--latency-probes N] [--recovery 1000:100]
                          [--recovery-timing short,default] [--admin-url URL]

Side by side in one run, each in its own child process running ``surehand up``'s runtime
(``surehand.embedded.Embedded``: SQLite, the in-process broker, fakeredis, a thread pool of
8, no HTTP) with the agents of ``bench/scale_agents.py``:

* ``doorbell``: the in-process transport as shipped (``surehand.queue.inprocess``: the worker
  waits on a condition that every publish and ack rings);
* ``kombu``: kombu's own ``memory://`` transport (the worker sleeps its one-second polling
  interval whenever its queues are empty or its prefetch window is full): what ``up`` was.

Each child measures (wall clock ``time.time()``, the agent stamps in the same process):
(a) idle: ``--probes`` TASKs one after another to the ``probe`` agent: submit -> agent
    running, submit -> first effect recorded (its operation's intent and outcome committed);
(b) steady load: no-op TASKs offered at ``--rate`` a second for ``--window`` seconds while
    probes run every 0.25 s: the same two latencies, and the no-op sessions completed a second.

(c) concurrent long sessions: for each of ``--sessions`` (100 and 1,000), one
    ``surehand worker --pool threads --concurrency N`` on Postgres (its own database
    ``surehand_bench_scale``) and a private ``redis-server`` holds N sleeping Python sessions
    (``--hold`` seconds each, the default lease TTL 30 s and heartbeat 10 s): sessions running
    at once, leases lost (attempts that did not succeed), worker RSS and threads per session
    over the idle worker, Redis commands and CPU a second, Postgres connections, and the
    reconciler's pass time with all of them running.

(d) Postgres start latency, idle (``bench/scale_latency.py``): ``--latency-probes`` probes
    alternating between a ``surehand worker`` on Postgres with a private ``redis-server`` broker
    (write_task -> agent running, -> first effect recorded) and a bare Celery task on the same
    ``redis-server`` (send_task -> task running).
(e) Recovery under scale: for each ``--recovery`` SESSIONS:KILLED and each ``--recovery-timing``
    (``short``: lease TTL 3 s, heartbeat 1 s, reconcile 1 s, grace 2 s; ``default``: 30, 10, 5,
    15), two workers hold the sleeping sessions, the one holding KILLED of them is SIGKILLed:
    kill -> SESSION_LOST and kill -> successor started, p50/p99.

Results are printed as rich tables and saved to ``bench/results/scale-<UTC>.json`` with a
top-level ``summary``. Not measured here (named in ``not_measured``): a sleeping command agent,
heartbeat jitter, other pools, Postgres start latency under steady load; ``http_create_vs_bare``
is measured by ``bench/http_api.py``.
This is a benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import scale_latency
from procs import exit_on_sigterm, machine
from rich.console import Console
from rich.table import Table
from scale_probes import Stamps, latency, probe_once

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
VARIANTS = ("doorbell", "kombu")
TIMINGS = {"short": scale_latency.SHORT, "default": scale_latency.DEFAULT}
console = Console()


def offer_load(runtime: Any, rate: float, window: float, stop: threading.Event) -> int:
    """Submit no-op TASKs at ``rate`` a second for ``window`` seconds; how many."""
    started, offered = time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - started < window:
        due = started + offered / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        runtime.sh.write_task(sender="PM", recipient="NOP", subject=f"noop {offered}")
        offered += 1
    return offered


def steady(
    runtime: Any, stamps: Stamps, rate: float, window: float, submitters: int
) -> dict[str, Any]:
    """Probes every 0.25 s while no-op TASKs are offered at ``rate`` (by ``submitters``
    threads, each at its share: one thread's write_task alone tops out near 100/s here)."""
    probes: dict[str, list[float]] = {"running": [], "effect": []}
    stop, offered = threading.Event(), [0] * submitters

    def load(index: int) -> None:
        offered[index] = offer_load(runtime, rate / submitters, window, stop)

    before, cpu = stamps.count("noop"), time.process_time()
    loaders = [threading.Thread(target=load, args=(n,), daemon=True) for n in range(submitters)]
    started = time.monotonic()
    for loader in loaders:
        loader.start()
    while any(loader.is_alive() for loader in loaders):
        probe_once(runtime, stamps, probes)
        time.sleep(0.25)
    elapsed = time.monotonic() - started
    # The sessions still running at the window's end finish within a second or two; those
    # count, as the window's own throughput, only once they are done.
    drained = time.monotonic() + 10.0
    while stamps.count("noop") - before < sum(offered) and time.monotonic() < drained:
        time.sleep(0.05)
    done, cpu = stamps.count("noop") - before, time.process_time() - cpu
    return {
        "submitters": submitters,
        # The whole process's CPU (submitters, probes and sessions alike) per no-op session:
        # one process under one GIL can do at most 1000 / this many a second.
        "process_cpu_ms_per_session": round(cpu * 1000 / done, 2) if done else None,
        "offered_per_second": round(sum(offered) / elapsed, 1),
        "completed_per_second": round(done / (time.monotonic() - started), 1),
        "completed_all": done >= sum(offered),
        "running": latency(probes["running"]),
        "effect": latency(probes["effect"]),
    }


def child(variant: str, probes: int, rate: float, window: float, submitters: int) -> dict[str, Any]:
    """One ``surehand up`` runtime in this process with ``variant``'s transport; measures."""
    from surehand.config import Settings
    from surehand.embedded import Embedded
    from surehand.queue import inprocess

    if variant == "kombu":  # what `up` ran before: kombu's polling memory transport
        inprocess.install = lambda: None
    home = Path(tempfile.mkdtemp(prefix="surehand-scale-"))
    stamps = Stamps(home / "stamps.jsonl")
    os.environ["BENCH_SCALE_STAMPS"] = str(stamps.path)
    settings = Settings.model_validate(
        {"home": home, "redis_url": "", "broker_url": "", "agents": AGENTS}
    )
    runtime = Embedded(settings, with_api=False, concurrency=8)
    runtime.start()
    try:
        idle: dict[str, list[float]] = {"running": [], "effect": []}
        for _ in range(probes):
            probe_once(runtime, stamps, idle)
            time.sleep(0.05)
        loaded = steady(runtime, stamps, rate, window, submitters)
    finally:
        runtime.stop()
    return {
        "variant": variant,
        "idle": {"running": latency(idle["running"]), "effect": latency(idle["effect"])},
        "steady": loaded,
    }


AGENTS = "QA=scale_agents:probe,NOP=scale_agents:noop"
SCALE_DATABASE = "surehand_bench_scale"


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (KiB) and Threads of a process, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {"rss_kib": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"])}


def count_attempts(sh: Any) -> dict[str, int]:
    from sqlalchemy import func, select

    from surehand.store.schema import attempts

    query = select(attempts.c.state, func.count()).group_by(attempts.c.state)
    with sh.store.engine.connect() as connection:
        return {str(state): int(n) for state, n in connection.execute(query)}


def postgres_connections(admin_url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(admin_url)
    with engine.connect() as connection:
        found = connection.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db"),
            {"db": SCALE_DATABASE},
        ).scalar_one()
    engine.dispose()
    return int(found)


def concurrent(sessions: int, hold: float, admin_url: str) -> dict[str, Any]:
    """``sessions`` sleeping Python sessions at once in one ``surehand worker`` (threads pool,
    concurrency = sessions) on Postgres and a private Redis: cost per session, leases lost."""
    from procs import stop_group

    agents = "DEV=scale_agents:sleeping"
    with scale_latency.deployment(admin_url, agents, database=SCALE_DATABASE) as here:
        sh, server = here.sh, here.server
        worker = scale_latency.surehand_worker(
            here.tmp, here.env, f"held-{sessions}", sessions, "DEV"
        )
        try:
            idle = proc_status(worker.pid)
            for n in range(sessions):
                sh.write_task(sender="PM", recipient="DEV", subject=f"wait {n}", body=str(hold))
            deadline = time.monotonic() + hold
            while count_attempts(sh).get("running", 0) < sessions and time.monotonic() < deadline:
                time.sleep(0.5)
            running = count_attempts(sh).get("running", 0)
            commands, cpu = sum(server.commandstats().values()), server.cpu_seconds()
            window = 10.0
            time.sleep(window)
            commands = sum(server.commandstats().values()) - commands
            cpu = server.cpu_seconds() - cpu
            held = proc_status(worker.pid)  # after the first renewals: heartbeat threads started
            connections = postgres_connections(admin_url)
            passes = []
            for _ in range(3):
                started = time.perf_counter()
                sh.reconciler.run_once()
                passes.append((time.perf_counter() - started) * 1000)
            while count_attempts(sh).get("running", 0) and time.monotonic() < deadline + 120:
                time.sleep(1.0)
            states = count_attempts(sh)
        finally:
            stop_group(worker)
    return {
        "sessions": sessions,
        "hold_seconds": hold,
        "pool": "threads",
        "workers": 1,
        "running_at_once": running,
        "attempt_states": states,
        "leases_lost": sum(n for state, n in states.items() if state != "succeeded"),
        "worker_rss_mib_idle": round(idle["rss_kib"] / 1024, 1),
        "worker_rss_mib_held": round(held["rss_kib"] / 1024, 1),
        "rss_mib_per_session": round((held["rss_kib"] - idle["rss_kib"]) / 1024 / running, 3)
        if running
        else None,
        "threads_idle": idle["threads"],
        "threads_held": held["threads"],
        "threads_per_session": round((held["threads"] - idle["threads"]) / running, 2)
        if running
        else None,
        "redis_commands_per_second": round(commands / window, 1),
        "redis_cpu_percent": round(cpu / window * 100, 2),
        "postgres_connections": connections,
        "reconciler_pass_ms": round(min(passes), 2),
    }


def run_child(variant: str, options: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", variant]
    argv += ["--probes", str(options.probes), "--rate", str(options.rate)]
    argv += ["--window", str(options.window), "--submitters", str(options.submitters)]
    env = {**os.environ, "PYTHONPATH": f"{BENCH}{os.pathsep}{BENCH.parent}"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(results: list[dict[str, Any]]) -> Table:
    out = Table(title="surehand up: submit -> agent running / first effect recorded (ms)")
    for column in ("transport", "load", "running p50", "p99", "effect p50", "p99", "done/s"):
        out.add_column(column, justify="right")
    for result in results:
        for load in ("idle", "steady"):
            part = result[load]
            rate = "" if load == "idle" else f"{part['completed_per_second']}"
            shown = load if load == "idle" else f"{part['offered_per_second']}/s offered"
            out.add_row(
                result["variant"],
                shown,
                str(part["running"]["p50_ms"]),
                str(part["running"]["p99_ms"]),
                str(part["effect"]["p50_ms"]),
                str(part["effect"]["p99_ms"]),
                rate,
            )
    return out


def held_table(held: list[dict[str, Any]]) -> Table:
    out = Table(title="concurrent sleeping sessions in one worker (threads pool, Postgres)")
    columns = (
        "sessions",
        "running_at_once",
        "leases_lost",
        "rss_mib_per_session",
        "threads_per_session",
        "redis_commands_per_second",
        "redis_cpu_percent",
        "postgres_connections",
        "reconciler_pass_ms",
    )
    for column in columns:
        out.add_column(column.replace("_", " "), justify="right")
    for row in held:
        out.add_row(*(str(row[column]) for column in columns))
    return out


def summary(results: dict[str, dict[str, Any]], held: list[dict[str, Any]]) -> dict[str, Any]:
    new, old = results["doorbell"], results["kombu"]
    most = max(held, key=lambda row: row["running_at_once"]) if held else None
    p50, old_p50 = new["steady"]["running"]["p50_ms"], old["steady"]["running"]["p50_ms"]
    return {
        "concurrent_sessions": most["running_at_once"] if most else None,
        "leases_lost": sum(row["leases_lost"] for row in held),
        "rss_mib_per_session": most["rss_mib_per_session"] if most else None,
        "embedded_start_p50_ms": p50,
        "embedded_start_p99_ms": new["steady"]["running"]["p99_ms"],
        "embedded_idle_start_p50_ms": new["idle"]["running"]["p50_ms"],
        "embedded_sessions_per_second": new["steady"]["completed_per_second"],
        "embedded_offered_per_second": new["steady"]["offered_per_second"],
        "embedded_kombu_polling_start_p50_ms": old_p50,
        "embedded_kombu_polling_sessions_per_second": old["steady"]["completed_per_second"],
        "embedded_start_p50_vs_kombu_polling": round(old_p50 / p50, 1) if p50 else None,
        "http_create_vs_bare": None,
        "not_measured": [
            "a sleeping command agent beside the Python one; heartbeat jitter; pool compared",
            "Postgres start latency under steady load (idle is measured)",
            "http_create_vs_bare: bench/http_api.py measures it",
        ],
    }


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke: few probes, short window")
    parser.add_argument("--probes", type=int, default=40, help="idle probes per variant")
    parser.add_argument("--rate", type=float, default=100.0, help="no-op TASKs a second")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of steady load")
    parser.add_argument("--submitters", type=int, default=2, help="threads offering the load")
    parser.add_argument("--sessions", default="100,1000", help="concurrent sessions, comma list")
    parser.add_argument("--hold", type=float, default=40.0, help="seconds each session waits")
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "SUREHAND_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1/test"
        ),
    )
    parser.add_argument("--latency-probes", type=int, default=100, help="Postgres idle probes")
    parser.add_argument(
        "--latency-load", type=float, default=20.0, help="no-op TASKs/s while probing loaded"
    )
    parser.add_argument("--recovery", default="1000:100", help="SESSIONS:KILLED, comma list")
    parser.add_argument("--recovery-timing", default="short,default", help="short and/or default")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.quick:
        options.probes, options.window, options.sessions, options.hold = 8, 3.0, "20", 15.0
        options.latency_probes, options.recovery = 30, "200:100"
    return options


def main() -> int:
    exit_on_sigterm()
    options = parse_options()
    if options.child:
        print(
            json.dumps(
                child(
                    options.child, options.probes, options.rate, options.window, options.submitters
                )
            )
        )
        return 0
    results = {variant: run_child(variant, options) for variant in VARIANTS}
    console.print(table(list(results.values())))
    held = [
        concurrent(int(n), options.hold, options.admin_url) for n in options.sessions.split(",")
    ]
    console.print(held_table(held))
    start = scale_latency.start_latency(
        options.latency_probes, options.admin_url, options.latency_load
    )
    console.print(scale_latency.start_table(start))
    recovered = [
        scale_latency.recovery(int(total), int(killed), timing, options.admin_url)
        for timing in (TIMINGS[name] for name in options.recovery_timing.split(","))
        for total, killed in (pair.split(":") for pair in options.recovery.split(","))
    ]
    console.print(scale_latency.recovery_table(recovered))
    document = {
        "bench": "scale",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "options": {k: v for k, v in vars(options).items() if k != "child"},
        "summary": {**summary(results, held), **scale_latency.summary(start, recovered)},
        "embedded": results,
        "concurrent": held,
        "postgres_start": start,
        "recovery": recovered,
    }
    console.print_json(data=document["summary"])
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"scale-{stamp}.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    console.print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
