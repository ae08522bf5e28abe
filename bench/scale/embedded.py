"""Start latency of ``surehand up`` (the embedded runtime), with its in-process transport and
with what it ran before (kombu's polling memory transport): part ``embedded`` of
``bench/scale/run.py``. Each variant runs in a child process of its own (``run_child``), as
``python bench/scale/embedded.py VARIANT ...``, which prints its result as one JSON line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.table import Table

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.scale.probes import AGENTS_MODULE, REPO, Stamps, latency, offer_paced, probe_once

VARIANTS = ("doorbell", "kombu")
AGENTS = f"QA={AGENTS_MODULE}:probe,NOP={AGENTS_MODULE}:noop"


def offer_load(runtime: Any, rate: float, window: float, stop: threading.Event) -> int:
    """Submit no-op TASKs at ``rate`` a second for ``window`` seconds; how many."""

    def offer(n: int) -> None:
        runtime.sh.write_task(sender="PM", recipient="NOP", subject=f"noop {n}")

    return offer_paced(rate, offer, stop, window)


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


def run_child(variant: str, options: argparse.Namespace) -> dict[str, Any]:
    """``child`` in a process of its own (a runtime per variant); its result."""
    argv = [sys.executable, str(Path(__file__).resolve()), variant]
    argv += ["--probes", str(options.probes), "--rate", str(options.rate)]
    argv += ["--window", str(options.window), "--submitters", str(options.submitters)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
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


def summary(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The summary fields of the embedded runs (none if it did not run)."""
    fields: dict[str, Any] = {}
    if results:
        new, old = results["doorbell"], results["kombu"]
        p50, old_p50 = new["steady"]["running"]["p50_ms"], old["steady"]["running"]["p50_ms"]
        fields |= {
            "embedded_start_p50_ms": p50,
            "embedded_start_p99_ms": new["steady"]["running"]["p99_ms"],
            "embedded_idle_start_p50_ms": new["idle"]["running"]["p50_ms"],
            "embedded_sessions_per_second": new["steady"]["completed_per_second"],
            "embedded_offered_per_second": new["steady"]["offered_per_second"],
            "embedded_kombu_polling_start_p50_ms": old_p50,
            "embedded_kombu_polling_sessions_per_second": old["steady"]["completed_per_second"],
            "embedded_start_p50_vs_kombu_polling": round(old_p50 / p50, 1) if p50 else None,
        }
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--probes", type=int, default=40, help="idle probes")
    parser.add_argument("--rate", type=float, default=100.0, help="no-op TASKs a second")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of steady load")
    parser.add_argument("--submitters", type=int, default=2, help="threads offering the load")
    options = parser.parse_args()
    measured = child(
        options.variant, options.probes, options.rate, options.window, options.submitters
    )
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
