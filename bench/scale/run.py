"""Start latency of ``surehand up`` (before and after), and many long sessions in one worker.

    python bench/scale/run.py [--quick]
                          [--parts embedded,held,command,pools,max,latency,recovery,http]
                          [--probes N] [--rate R] [--window S] [--sessions 100,1000] [--hold S]
                          [--command-sessions 100,1000] [--sandboxed-sessions 100]
                          [--command-hold S] [--pools prefork:100,gevent:100]
                          [--max-sessions 2000,3000] [--max-hold S] [--latency-probes N]
                          [--recovery 1000:100] [--recovery-timing short,default]
                          [--latency-load R] [--http-rounds N] [--submitters N] [--admin-url URL]

Side by side in one run, each in its own child process running ``surehand up``'s runtime
(``surehand.embedded.Embedded``: SQLite, the in-process broker, fakeredis, a thread pool of
8, no HTTP) with the agents of ``bench/scale/agents.py``:

* ``doorbell``: the in-process transport as shipped (``surehand.queue.inprocess``: the worker
  waits on a condition that every publish and ack rings);
* ``kombu``: kombu's own ``memory://`` transport (the worker sleeps its one-second polling
  interval whenever its queues are empty or its prefetch window is full): what ``up`` was.

Each child measures (wall clock ``time.time()``, the agent stamps in the same process):
(a) idle: ``--probes`` TASKs one after another to the ``probe`` agent: submit -> agent
    running, submit -> first effect recorded (its operation's intent and outcome committed);
(b) steady load: no-op TASKs offered at ``--rate`` a second (by ``--submitters`` threads) for
    ``--window`` seconds while probes run every 0.25 s: the same two latencies, the no-op
    sessions completed a second, and the process's CPU per no-op session.

(c) concurrent long sessions (``bench/scale/held.py``): one ``surehand worker`` on Postgres
    (its own database ``surehand_bench_scale``) and a private ``redis-server`` holds N sleeping
    sessions (the default lease TTL 30 s and heartbeat 10 s): sessions running at once, leases
    lost, memory and threads of the worker process and (separately) of its descendants, Redis
    commands and CPU a second, Postgres connections, the reconciler's pass time, and heartbeat
    jitter (the lateness of lease renewals, from the lease keys' PTTL sampled every second).
    ``held``: ``--sessions`` Python agents (threads pool, ``--hold`` s); ``command``:
    ``--command-sessions`` command agents (``sh -c 'sleep S'``, ``SUREHAND_AGENT_SANDBOX=none``)
    and ``--sandboxed-sessions`` under the default sandbox (``auto``), ``--command-hold`` s;
    ``pools``: ``--pools`` POOL:N Python agents in other pools (``gevent-patched``: gevent with
    ``monkey.patch_all()`` run before surehand's CLI, as Celery's own CLI does for -P gevent);
    ``max``: ``--max-sessions`` Python agents, threads pool, beyond 1,000 (``--max-hold`` s).

(d) Postgres start latency (``bench/scale/pg_latency.py``): ``--latency-probes`` probes
    alternating between a ``surehand worker`` on Postgres with a private ``redis-server`` broker
    (write_task -> agent running, -> first effect recorded) and a bare Celery task on the same
    ``redis-server`` (send_task -> task running), idle, then half as many while no-op TASKs and
    as many bare Celery tasks are offered at ``--latency-load`` a second.
(e) Recovery under scale: for each ``--recovery`` SESSIONS:KILLED and each ``--recovery-timing``
    (``short``: lease TTL 3 s, heartbeat 1 s, reconcile 1 s, grace 2 s; ``default``: 30, 10, 5,
    15), two workers hold the sleeping sessions, the one holding KILLED of them is SIGKILLed:
    kill -> SESSION_LOST and kill -> successor started, p50/p99.

Results are printed as rich tables and saved to ``bench/results/scale-<UTC>.json`` with a
top-level ``summary``; ``--parts`` runs some parts only (the others are named in
``not_measured``). ``http``: ``http_create_vs_bare`` from a run of ``bench/create/http_api.py`` at 8
clients (``--http-rounds``; ``bench/scale/http_ratio.py``), its own results file named.
This is a benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import exit_on_sigterm, machine
from bench.common.results import save
from bench.scale import embedded, http_ratio, pg_latency, report
from bench.scale.deploy import DEFAULT, SHORT
from bench.scale.held import Spec, held

TIMINGS = {"short": SHORT, "default": DEFAULT}
console = Console(width=220)  # the held tables are wide; a log is not a terminal


def held_summary(parts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """``concurrent_sessions`` (with its leases lost and memory), ``command_agent``,
    ``heartbeat_jitter``, ``pools``, ``max_concurrent_sessions``."""
    fields: dict[str, Any] = {}
    kept = [row for row in parts["held"] if "error" not in row]
    if kept:
        most = max(kept, key=lambda row: row["running_at_once"])
        fields |= {
            "concurrent_sessions": most["running_at_once"],
            "leases_lost": sum(row["leases_lost"] for row in kept),
            "rss_mib_per_session": most["rss_mib_per_session"],
        }
    if parts["command"]:
        fields["command_agent"] = report.command_summary(parts["command"])
    jitter = report.jitter_summary([row for rows in parts.values() for row in rows])
    if jitter:
        fields["heartbeat_jitter"] = jitter
    if parts["pools"]:
        threads = [row for row in parts["held"] if row["sessions"] in POOL_BASELINE]
        fields["pools"] = report.pool_summary(threads[:1] + parts["pools"])
    if parts["max"]:
        fields["max_concurrent_sessions"] = report.max_summary(parts["held"] + parts["max"])
    return fields


POOL_BASELINE = (100, 50, 20)  # the threads run the pools are compared with
MISSING = {
    "embedded": "embedded (surehand up) start latency: not run (--parts)",
    "held": "concurrent sleeping Python sessions: not run (--parts)",
    "command": "a sleeping command agent at scale: not run (--parts)",
    "pools": "other pools (prefork, gevent) compared: not run (--parts)",
    "max": "beyond 1,000 sessions in one worker: not run (--parts)",
    "latency": "Postgres start latency, idle and under a steady load: not run (--parts)",
    "recovery": "recovery under scale: not run (--parts)",
    "http": "http_create_vs_bare (bench/create/http_api.py at 8 clients): not run (--parts)",
}


def not_measured(parts: set[str]) -> list[str]:
    """What this run did not measure."""
    return [MISSING[part] for part in MISSING if part not in parts]


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke: few probes, short window")
    parser.add_argument("--parts", default=",".join(MISSING), help="which parts to run")
    parser.add_argument("--probes", type=int, default=40, help="idle probes per variant")
    parser.add_argument("--rate", type=float, default=100.0, help="no-op TASKs a second")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of steady load")
    parser.add_argument("--submitters", type=int, default=2, help="threads offering the load")
    parser.add_argument("--sessions", default="100,1000", help="concurrent sessions, comma list")
    parser.add_argument("--hold", type=float, default=40.0, help="seconds each session waits")
    parser.add_argument("--command-sessions", default="100,1000", help="command agents held")
    parser.add_argument("--command-hold", type=float, default=120.0, help="their wait (starts)")
    parser.add_argument("--sandboxed-sessions", default="100", help="the same, default sandbox")
    parser.add_argument("--pools", default="prefork:100,gevent:100", help="POOL:SESSIONS list")
    parser.add_argument("--max-sessions", default="2000,3000", help="threads pool beyond 1,000")
    parser.add_argument("--max-hold", type=float, default=120.0, help="their wait (submit time)")
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
    parser.add_argument("--http-rounds", type=int, default=3, help="http_api.py rounds")
    parser.add_argument("--recovery", default="1000:100", help="SESSIONS:KILLED, comma list")
    parser.add_argument("--recovery-timing", default="short,default", help="short and/or default")
    options = parser.parse_args()
    if options.quick:
        options.probes, options.window, options.sessions, options.hold = 8, 3.0, "20", 15.0
        options.latency_probes, options.recovery = 30, "200:100"
        options.command_sessions, options.sandboxed_sessions = "20", "10"
        options.command_hold = 20.0
        options.pools, options.max_sessions = "prefork:10,gevent:10", ""
    return options


def numbers(listed: str) -> list[int]:
    return [int(n) for n in listed.split(",") if n]


def held_runs(options: argparse.Namespace, parts: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The held-session parts that ``parts`` names, each a list of ``held`` results."""
    hold, url, command_hold = options.hold, options.admin_url, options.command_hold
    specs: dict[str, list[Spec]] = {
        "held": [Spec(n, hold) for n in numbers(options.sessions)],
        "command": [
            Spec(n, command_hold, agent="command") for n in numbers(options.command_sessions)
        ]
        + [
            Spec(n, command_hold, agent="command", sandbox="auto")
            for n in numbers(options.sandboxed_sessions)
        ],
        "pools": [
            Spec(int(n), hold, pool=pool)
            for pool, n in (pair.split(":") for pair in options.pools.split(",") if pair)
        ],
        "max": [Spec(n, options.max_hold) for n in numbers(options.max_sessions)],
    }
    runs: dict[str, list[dict[str, Any]]] = {}
    for part, listed in specs.items():
        runs[part] = [held(spec, url) for spec in listed] if part in parts else []
        if runs[part]:
            console.print(report.held_table(runs[part], f"held sessions: {part}"))
    return runs


def main() -> int:
    exit_on_sigterm()
    options = parse_options()
    parts = set(options.parts.split(","))
    results = {}
    if "embedded" in parts:
        results = {variant: embedded.run_child(variant, options) for variant in embedded.VARIANTS}
        console.print(embedded.table(list(results.values())))
    runs = held_runs(options, parts)
    start, recovered = None, []
    if "latency" in parts:
        start = pg_latency.start_latency(
            options.latency_probes, options.admin_url, options.latency_load
        )
        console.print(pg_latency.start_table(start))
    if "recovery" in parts:
        recovered = [
            pg_latency.recovery(int(total), int(killed), timing, options.admin_url)
            for timing in (TIMINGS[name] for name in options.recovery_timing.split(","))
            for total, killed in (pair.split(":") for pair in options.recovery.split(","))
        ]
        console.print(pg_latency.recovery_table(recovered))
    http = {"median": None}
    if "http" in parts:
        http = http_ratio.create_vs_bare(options.http_rounds, 320 if options.quick else 640)
        console.print(f"HTTP create / bare FastAPI insert, 8 clients: {http}")
    document = {
        "bench": "scale",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "options": vars(options),
        "summary": {
            **embedded.summary(results),
            **held_summary(runs),
            **(pg_latency.summary(start, recovered) if start else {}),
            "http_create_vs_bare": http["median"],
            "not_measured": not_measured(parts),
        },
        "http_create_vs_bare": http,
        "embedded": results,
        "concurrent": runs["held"],
        "command_agent": runs["command"],
        "pools": runs["pools"],
        "beyond_1000": runs["max"],
        "postgres_start": start,
        "recovery": recovered,
    }
    console.print_json(data=document["summary"])
    save("scale", document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
