"""What ``sessions.py`` reads while its variants run: a batch's time, CPU (this process, the
workers, Redis, Postgres, the machine) and Redis commands per message; the in-process phase
profile of a session; what ``leases`` concurrent heartbeats cost."""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench.common.procs import CLOCK_TICKS
from bench.common.services import RedisServer, wait_for
from bench.common.store_counts import counted
from bench.peers.celery_noop import (
    noop_agent,
)
from bench.sessions.sessions_tables import console
from bench.sessions.sessions_variants import SessionBackend, Variant
from surehand.config import Settings
from surehand.dispatcher import runner as runner_module
from surehand.dispatcher.sessions import Session
from surehand.queue.heartbeat import Heartbeat
from surehand.queue.leases import LeaseStore


def run_batch(
    variant: Variant, n: int, redis_server: RedisServer, idle: dict[str, float]
) -> dict[str, Any]:
    target = variant.completed() + n
    variant.prepare(n)
    commands, redis_cpu, worker_cpu = (
        redis_server.commandstats(),
        redis_server.cpu_seconds(),
        variant.cpu_seconds(),
    )
    machine, database = machine_cpu(), postgres_cpu_seconds()
    started = time.perf_counter()
    variant.publish(n)
    wait_for(lambda: variant.completed() >= target, 600, f"{variant.name} to finish {n}")
    seconds = time.perf_counter() - started
    delta = redis_server.commandstats() - commands
    adjusted = {
        name: max(0.0, calls - idle.get(name, 0.0) * seconds) / n for name, calls in delta.items()
    }
    batch = {
        "messages": n,
        "seconds": seconds,
        "per_second": n / seconds,
        "redis_commands_per_message": sum(adjusted.values()),
        "redis_commands": {k: round(v, 3) for k, v in sorted(adjusted.items()) if v >= 0.005},
        "worker_cpu_ms_per_message": 1000 * (variant.cpu_seconds() - worker_cpu) / n,
        "redis_cpu_ms_per_message": 1000 * (redis_server.cpu_seconds() - redis_cpu) / n,
        "postgres_cpu_ms_per_message": 1000 * (postgres_cpu_seconds() - database) / n,
        "machine_busy_percent": machine_busy_percent(machine, machine_cpu()),
    }
    variant.batches.append(batch)
    variant.finish()
    return batch


def machine_cpu() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values), values[3] + values[4]  # idle + iowait


def machine_busy_percent(before: tuple[int, int], after: tuple[int, int]) -> float:
    total, idle = after[0] - before[0], after[1] - before[1]
    return 100.0 * (1 - idle / total) if total else 0.0


def postgres_cpu_seconds() -> float:
    """CPU time of every postgres process on this machine (the server shares its cores)."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if name.startswith("postgres"):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


def idle_rates(redis_server: RedisServer, seconds: float = 3.0) -> dict[str, float]:
    """Redis commands per second with every worker idle (BRPOP timeouts, heartbeats)."""
    before = redis_server.commandstats()
    time.sleep(seconds)
    delta = redis_server.commandstats() - before
    return {name: calls / seconds for name, calls in delta.items()}


def summarise(variant: Variant) -> dict[str, Any]:
    batches = variant.batches
    commands: Counter[str] = Counter()
    for batch in batches:
        commands.update({k: v / len(batches) for k, v in batch["redis_commands"].items()})
    return {
        "name": variant.name,
        "batches": batches,
        "per_second_median": statistics.median(b["per_second"] for b in batches),
        "redis_commands_per_message": statistics.median(
            b["redis_commands_per_message"] for b in batches
        ),
        "redis_commands": {k: round(v, 2) for k, v in commands.most_common()},
        "worker_cpu_ms_per_message": statistics.median(
            b["worker_cpu_ms_per_message"] for b in batches
        ),
        "redis_cpu_ms_per_message": statistics.median(
            b["redis_cpu_ms_per_message"] for b in batches
        ),
        "postgres_cpu_ms_per_message": statistics.median(
            b["postgres_cpu_ms_per_message"] for b in batches
        ),
        "machine_busy_percent": statistics.median(b["machine_busy_percent"] for b in batches),
    }


@contextmanager
def timed_phases(phases: dict[str, list[float]]) -> Iterator[None]:
    """Wrap the runner's steps so that each call's wall time lands in ``phases``."""
    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                phases.setdefault(phase, []).append(time.perf_counter() - started)

        patched.append((owner, attribute, original))
        setattr(owner, attribute, timed)

    wrap(runner_module, "claim", "claim (one store write)")
    wrap(LeaseStore, "acquire_with_generation", "lease SET NX PX + generation (one EVALSHA)")
    wrap(Heartbeat, "start", "heartbeat start (thread)")
    wrap(Heartbeat, "stop", "heartbeat stop (join)")
    # One transaction for an agent without operations; with operations the return commits
    # first, on its own (both inside this phase).
    wrap(Session, "settle", "settle: return + REPORT + review + end (one write)")
    wrap(LeaseStore, "release", "lease compare-and-delete")
    wrap(runner_module.SessionRunner, "run", "whole session")
    try:
        yield
    finally:
        for owner, attribute, original in reversed(patched):
            setattr(owner, attribute, original)


def profile_sessions(
    backend: SessionBackend, count: int, redis_server: RedisServer
) -> dict[str, Any]:
    """Sequential no-op sessions in this process: per-phase time, SQL and Redis per session."""
    handle = backend.handle
    handle.registry.register(backend.role, noop_agent)
    batch, backend.pending[:] = backend.pending[:count], backend.pending[count:]
    handle.runner  # noqa: B018  (build the runner and connect before measuring)
    handle.leases.ping()
    phases: dict[str, list[float]] = {}
    commands = redis_server.commandstats()
    with counted(handle.store) as sql, timed_phases(phases):
        for task in batch:
            outcome = handle.runner.run(task.task_id)
            assert outcome.outcome == "settled", outcome
    redis_delta = redis_server.commandstats() - commands
    n = len(batch)
    return {
        "sessions": n,
        "ms_per_session": {phase: 1000 * sum(times) / n for phase, times in sorted(phases.items())},
        "sql_statements_per_session": {k: v / n for k, v in sql.statements.most_common()},
        "durable_commits_per_session": {k: v / n for k, v in sql.durable.items()},
        "redis_commands_per_session": {k: v / n for k, v in redis_delta.most_common()},
    }


def heartbeat_cost(redis_server: RedisServer, leases: int, window: float) -> dict[str, Any]:
    """``leases`` live leases, each renewed by its own Heartbeat thread at the default interval."""
    settings = Settings()
    ttl_ms = int(settings.lease_ttl_seconds * 1000)
    interval = settings.heartbeat_seconds
    store = LeaseStore(
        redis.Redis.from_url(redis_server.url(1), decode_responses=True),
        namespace=f"bench-{uuid.uuid4().hex[:8]}",
    )
    beats: list[Heartbeat] = []
    with console.status(f"starting {leases} heartbeats over one interval ({interval:g}s)"):
        for n in range(leases):
            task_id, attempt_id = f"TASK-20260101-{n:04d}", uuid.uuid4().hex
            assert store.acquire(task_id, attempt_id, ttl_ms)
            beat = Heartbeat(store, task_id, attempt_id, ttl_ms, interval=interval)
            beat.start()
            beats.append(beat)
            time.sleep(interval / leases)  # sessions start at different times
    with console.status(f"measuring {leases} heartbeats for {window:g}s"):
        commands, redis_cpu = redis_server.commandstats(), redis_server.cpu_seconds()
        renewals = sum(b.renewals for b in beats)
        cpu, started = time.process_time(), time.perf_counter()
        time.sleep(window)
        elapsed = time.perf_counter() - started
        cpu_used = time.process_time() - cpu
        renewed = sum(b.renewals for b in beats) - renewals
        delta = redis_server.commandstats() - commands
        redis_used = redis_server.cpu_seconds() - redis_cpu
    lost = sum(b.lost.is_set() for b in beats)
    for beat in beats:
        beat.stop(timeout=0.1)
    held = sum(1 for n in range(leases) if store.holder(f"TASK-20260101-{n:04d}") is not None)
    store.client.close()
    return {
        "leases": leases,
        "ttl_seconds": settings.lease_ttl_seconds,
        "interval_seconds": interval,
        "window_seconds": elapsed,
        "renewals_per_second": renewed / elapsed,
        "expected_renewals_per_second": leases / interval,
        "redis_commands_per_second": {k: v / elapsed for k, v in delta.most_common()},
        "client_cpu_percent": 100 * cpu_used / elapsed,
        "redis_cpu_percent": 100 * redis_used / elapsed,
        "lost": lost,
        "still_held_after_window": held,
    }
