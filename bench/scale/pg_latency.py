"""Postgres start latency beside Celery's, and recovery latency under scale (``run.py`` runs it).

* ``start_latency``: one ``surehand worker`` (threads pool, 4) on Postgres and a private
  ``redis-server`` broker, and beside it a bare Celery worker (Celery's defaults, threads pool,
  4) on the same ``redis-server``. Idle probes alternate between the two: ``write_task`` ->
  agent running and -> first effect recorded (the ``probe`` agent of ``agents``), and
  Celery's ``send_task`` -> task body running (``celery_peer.stamp``). Wall clock
  ``time.time()`` on both sides of one machine. One warm-up pair first (not counted). Then
  the same under a steady load: no-op TASKs (the ``noop`` agent, same worker) and as many
  bare Celery tasks offered at ``load_rate`` a second while half as many probe pairs run.
* ``recovery``: ``victims`` sleeping sessions in worker A, then ``sessions - victims`` more in
  worker B (concurrency ``sessions``: room for the successors); A is SIGKILLed; a reconciler
  loop in this process (what ``surehand beat`` or a ``surehand reconcile`` cron runs) makes
  passes every ``reconcile`` seconds. Per victim TASK: kill -> attempt ``SESSION_LOST``
  (its ``ended_at``) and kill -> successor attempt started (its ``started_at``), from the store.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.common.procs import stop_group
from bench.scale.deploy import Deployment, Timing, deployment, launch, surehand_worker
from bench.scale.probes import AGENTS_MODULE, Stamps, latency, offer_paced, probe_once

# The victim worker alone serves VIC (Celery would prefetch later TASKs into a full worker);
# the survivor serves VIC (the victims' successors) and DEV (the other sessions).
AGENTS = f"VIC={AGENTS_MODULE}:sleeping,DEV={AGENTS_MODULE}:sleeping"


def start_latency(probes: int, admin_url: str, load_rate: float = 20.0) -> dict[str, Any]:
    """Start latency on Postgres beside Celery's publish -> start on the same broker: idle,
    then with no-op TASKs (and as many bare Celery tasks) offered at ``load_rate`` a second."""
    with deployment(admin_url, f"QA={AGENTS_MODULE}:probe,NOP={AGENTS_MODULE}:noop") as here:
        stamps = Stamps(Path(here.env["BENCH_SCALE_STAMPS"]))
        worker = surehand_worker(here.tmp, here.env, "surehand-latency", 4, "QA,NOP")
        celery_env = {**here.env, "BENCH_BROKER_URL": here.server.url(2)}
        argv = [sys.executable, "-m", "celery", "-A", "bench.scale.celery_peer", "worker"]
        argv += ["--pool", "threads", "--concurrency", "4", "-Q", "bench.stamp", "-n", "peer@%h"]
        argv += ["--loglevel", "info", "--without-mingle", "--without-gossip"]
        peer = launch(argv, celery_env, here.tmp / "celery.log", "ready.")
        os.environ["BENCH_BROKER_URL"] = celery_env["BENCH_BROKER_URL"]
        try:
            probe_pair(here, stamps, {"running": [], "effect": [], "celery": []}, "warm")
            idle = probe_rounds(here, stamps, probes, "i")
            loaded = under_load(here, stamps, max(probes // 2, 1), load_rate)
        finally:
            stop_group(worker)
            stop_group(peer)
    return {"probes": probes, **idle, "loaded": loaded}


def probe_pair(here: Deployment, stamps: Stamps, seen: dict[str, list[float]], key: str) -> None:
    """One surehand probe TASK, then one bare Celery task: their start latencies."""
    from bench.scale import celery_peer  # reads BENCH_BROKER_URL: set by now

    probe_once(here, stamps, seen)
    time.sleep(0.05)
    submitted = time.time()
    celery_peer.app.send_task(celery_peer.STAMP, args=[key], queue="bench.stamp")
    at = stamps.wait(key, "celery")
    if at is not None:
        seen["celery"].append(at - submitted)
    time.sleep(0.05)


def probe_rounds(here: Deployment, stamps: Stamps, probes: int, prefix: str) -> dict[str, Any]:
    """``probes`` probe pairs (after one warm-up pair, not counted): latencies and the ratio."""
    seen: dict[str, list[float]] = {"running": [], "effect": [], "celery": []}
    for n in range(probes):
        probe_pair(here, stamps, seen, f"{prefix}{n}")
    result = {what: latency(values) for what, values in seen.items()}
    ratio = None
    if result["running"]["p50_ms"] and result["celery"]["p50_ms"]:
        ratio = round(result["running"]["p50_ms"] / result["celery"]["p50_ms"], 2)
    return {**result, "running_p50_over_celery_p50": ratio}


def under_load(here: Deployment, stamps: Stamps, probes: int, rate: float) -> dict[str, Any]:
    """Probe pairs while no-op TASKs and bare Celery tasks are each offered at ``rate``."""
    stop, offered = threading.Event(), [0]
    before = stamps.count("noop")

    def offer() -> None:
        offered[0] = offer_both(here, rate, stop)

    loader = threading.Thread(target=offer, daemon=True)
    started = time.monotonic()
    loader.start()
    try:
        result = probe_rounds(here, stamps, probes, "l")
    finally:
        stop.set()
        loader.join()
    elapsed = time.monotonic() - started
    return {
        **result,
        "offered_per_second": round(offered[0] / elapsed, 1),
        "noop_sessions_per_second": round((stamps.count("noop") - before) / elapsed, 1),
    }


def offer_both(here: Deployment, rate: float, stop: threading.Event) -> int:
    """A no-op TASK and a bare Celery task every 1/``rate`` s until ``stop``; how many."""
    from bench.scale import celery_peer  # reads BENCH_BROKER_URL: set by now

    def offer(n: int) -> None:
        here.sh.write_task(sender="PM", recipient="NOP", subject=f"noop {n}")
        celery_peer.app.send_task(celery_peer.STAMP, args=[f"n{n}"], queue="bench.stamp")

    return offer_paced(rate, offer, stop)


def attempt_times(sh: Any, task_ids: set[str]) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from surehand.store.schema import attempts

    query = select(
        attempts.c.task_id, attempts.c.number, attempts.c.state, attempts.c.worker,
        attempts.c.started_at, attempts.c.ended_at,
    )  # fmt: skip
    with sh.store.engine.connect() as connection:
        rows = [dict(row._mapping) for row in connection.execute(query)]
    return [row for row in rows if row["task_id"] in task_ids] if task_ids else rows


def reconcile_every(sh: Any, interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        sh.reconciler.run_once()


def recovery(sessions: int, victims: int, timing: Timing, admin_url: str) -> dict[str, Any]:
    """SIGKILL the worker holding ``victims`` of ``sessions``: kill -> lost, -> successor."""
    with deployment(admin_url, AGENTS, timing) as here:
        workers = []
        stop = threading.Event()
        try:
            workers.append(surehand_worker(here.tmp, here.env, "victim", victims, "VIC"))
            ids = submit_and_wait(here.sh, "VIC", victims, 600.0)
            survivor = surehand_worker(here.tmp, here.env, "survivor", sessions, "VIC,DEV")
            workers.append(survivor)
            submit_and_wait(here.sh, "DEV", sessions - victims, 600.0)
            time.sleep(timing.heartbeat * 2)  # every session has renewed its lease once
            loop = threading.Thread(
                target=reconcile_every, args=(here.sh, timing.reconcile, stop), daemon=True
            )
            loop.start()
            victim_ids = {
                r["task_id"]
                for r in attempt_times(here.sh, ids)
                if r["state"] == "running" and f":{workers[0].pid}:" in r["worker"]
            }
            killed = time.time()
            os.killpg(workers[0].pid, signal.SIGKILL)
            lost, started = wait_recovered(here.sh, victim_ids, killed, timing)
            running = sum(1 for r in attempt_times(here.sh, set()) if r["state"] == "running")
        finally:
            stop.set()
            for worker in workers:
                stop_group(worker)
    return {
        "sessions": sessions,
        "victims": len(victim_ids),
        "settings": timing.settings(),
        "killed_to_session_lost": latency(lost),
        "killed_to_successor_started": latency(started),
        "recovered": len(started),
        "running_after": running,
    }


def submit_and_wait(sh: Any, role: str, count: int, timeout: float) -> set[str]:
    """Submit ``count`` sleeping TASKs to ``role``; wait until all are running; their ids."""
    ids = {
        str(sh.write_task(sender="PM", recipient=role, subject=f"wait {n}", body="3600").task_id)
        for n in range(count)
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = attempt_times(sh, ids)
        if sum(1 for row in rows if row["state"] == "running") >= count:
            return ids
        time.sleep(0.5)
    raise SystemExit(f"only some of {count} sessions started in {timeout} s")


def wait_recovered(
    sh: Any, victims: set[str], killed: float, timing: Timing
) -> tuple[list[float], list[float]]:
    """Seconds from the kill to each victim's SESSION_LOST and to its successor's start."""
    deadline = time.monotonic() + timing.lease_ttl + timing.grace + 120
    while time.monotonic() < deadline:
        rows = attempt_times(sh, victims)
        lost = [r["ended_at"].timestamp() - killed for r in rows if r["state"] == "SESSION_LOST"]
        started = [r["started_at"].timestamp() - killed for r in rows if r["number"] > 1]
        if len(lost) >= len(victims) and len(started) >= len(victims):
            return lost, started
        time.sleep(0.2)
    return lost, started


def start_table(result: dict[str, Any]) -> Table:
    loaded = result["loaded"]
    out = Table(title="Postgres: submit -> start, beside Celery publish -> start (ms)")
    for column in ("measure", "n", "idle p50", "p99", "loaded p50", "p99"):
        out.add_column(column, justify="right")
    for key, label in (
        ("running", "write_task -> agent running"),
        ("effect", "write_task -> first effect recorded"),
        ("celery", "bare Celery send_task -> task running"),
    ):
        idle, busy = result[key], loaded[key]
        out.add_row(
            label,
            f"{idle['n']} / {busy['n']}",
            *(str(row[q]) for row in (idle, busy) for q in ("p50_ms", "p99_ms")),
        )
    out.caption = (
        f"loaded: {loaded['offered_per_second']}/s no-op TASKs and as many Celery tasks "
        f"offered; {loaded['noop_sessions_per_second']} no-op sessions/s completed"
    )
    return out


def recovery_table(results: list[dict[str, Any]]) -> Table:
    out = Table(title="SIGKILL a worker: kill -> SESSION_LOST / -> successor started (ms)")
    for column in ("killed", "settings", "lost p50 / p99", "successor p50 / p99", "recovered"):
        out.add_column(column, justify="right")
    for result in results:
        lost, started = result["killed_to_session_lost"], result["killed_to_successor_started"]
        timing = result["settings"]
        out.add_row(
            f"{result['victims']} of {result['sessions']}",
            f"TTL {timing['lease_ttl_seconds']} s, heartbeat {timing['heartbeat_seconds']} s, "
            f"reconcile {timing['reconcile_interval_seconds']} s, "
            f"grace {timing['lost_grace_seconds']} s",
            f"{lost['p50_ms']} / {lost['p99_ms']}",
            f"{started['p50_ms']} / {started['p99_ms']}",
            str(result["recovered"]),
        )
    return out


def summary(start: dict[str, Any], recovered: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary fields of these two measurements."""
    return {
        "start_p50_ms": start["running"]["p50_ms"],
        "start_p99_ms": start["running"]["p99_ms"],
        "start_effect_p50_ms": start["effect"]["p50_ms"],
        "start_effect_p99_ms": start["effect"]["p99_ms"],
        "celery_publish_start_p50_ms": start["celery"]["p50_ms"],
        "celery_publish_start_p99_ms": start["celery"]["p99_ms"],
        "start_p50_over_celery_p50": start["running_p50_over_celery_p50"],
        "loaded_offered_per_second": start["loaded"]["offered_per_second"],
        "loaded_start_p50_ms": start["loaded"]["running"]["p50_ms"],
        "loaded_start_p99_ms": start["loaded"]["running"]["p99_ms"],
        "loaded_start_effect_p50_ms": start["loaded"]["effect"]["p50_ms"],
        "loaded_celery_publish_start_p50_ms": start["loaded"]["celery"]["p50_ms"],
        "loaded_celery_publish_start_p99_ms": start["loaded"]["celery"]["p99_ms"],
        "recovery": [
            {
                "sessions": result["sessions"],
                "killed": result["victims"],
                "recovered": result["recovered"],
                "settings": result["settings"],
                "session_lost_p50_ms": result["killed_to_session_lost"]["p50_ms"],
                "session_lost_p99_ms": result["killed_to_session_lost"]["p99_ms"],
                "successor_started_p50_ms": result["killed_to_successor_started"]["p50_ms"],
                "successor_started_p99_ms": result["killed_to_successor_started"]["p99_ms"],
            }
            for result in recovered
        ],
    }
