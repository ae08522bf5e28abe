"""Benchmark the reconciler: pass time against running attempts, and loss detection latency.

    python bench/sessions/reconcile.py [--quick] [--passes N] [--no-postgres] [--sessions N]
                                       [--kills N] [--only-kills]

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
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Table

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import machine
from bench.common.results import save, utc_stamp
from bench.common.services import RedisServer
from bench.sessions import reconcile_detection as detect
from bench.sessions.reconcile_detection import DEFAULTS, SCALED, SLACK, model_bound
from bench.sessions.reconcile_passes import LIVE_SHARE, PassResult, console, run_pass_benchmarks

PG_ADMIN_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


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
                measured["heartbeat stopped in-process"] = detect.measure_detection(
                    options.sessions // scale or 20, options.spread / scale, server, tmp
                )
            if options.kills:
                measured["SIGKILL of surehand worker, beat"] = detect.measure_real_kills(
                    options.kills, server, tmp, admin_url, postgres=not options.no_postgres
                )
        finally:
            server.stop()
    model = {
        SCALED_NAME: detect.analytic(SCALED, grid=False),
        DEFAULTS_NAME: detect.analytic(DEFAULTS, grid=False),
        "defaults, on the Celery beat grid": detect.analytic(DEFAULTS, grid=True),
    }
    for name, profile in profiles.items():
        console.rule(f"profile of one pass: {name}")
        console.print(profile, markup=False, highlight=False)
    if results:
        console.print(pass_table(results))
    console.print(detection_table(measured, model))
    save_results(options, results, measured, model, profiles)
    return 0


def save_results(
    options: argparse.Namespace,
    results: Sequence[PassResult],
    measured: dict[str, dict[str, Any]],
    model: dict[str, dict[str, float]],
    profiles: dict[str, str],
) -> None:
    detection: dict[str, Any] = {
        "analytic": model,
        "model_bound_seconds": {"scaled": model_bound(SCALED), "defaults": model_bound(DEFAULTS)},
    }
    if "heartbeat stopped in-process" in measured:
        detection["measured_scaled"] = measured["heartbeat stopped in-process"]
    if "SIGKILL of surehand worker, beat" in measured:
        detection["measured_real_kills_scaled"] = measured["SIGKILL of surehand worker, beat"]
    stamp = utc_stamp()
    document = {"bench": "reconcile", "at": stamp, "machine": machine(), "options": vars(options)}
    document |= {"live_lease_share": LIVE_SHARE, "pass_time": [asdict(r) for r in results]}
    save("reconcile", {**document, "detection": detection, "profiles": profiles}, stamp)


if __name__ == "__main__":
    raise SystemExit(main())
