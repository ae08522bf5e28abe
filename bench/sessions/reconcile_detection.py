"""Parts (b) and (c) of ``reconcile.py``: how long a lost session takes to be detected, as the
model bounds it, with the heartbeat stopped in-process, and with real ``surehand worker``
processes SIGKILLed (their agent, ``sleeping_agent``, is loaded by the workers as
``bench.sessions.reconcile_detection:sleeping_agent``)."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common.services import Proc, RedisServer, spawn_argv, wait_ready
from bench.sessions.reconcile_passes import console, postgres_store
from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.dispatcher.claims import claim
from surehand.dispatcher.reconciler import reconcile_loop
from surehand.facade import Surehand
from surehand.model import AttemptState
from surehand.queue.heartbeat import Heartbeat
from surehand.store import Store, attempts

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Timing:
    ttl: float
    heartbeat: float
    grace: float
    interval: float


SCALED = Timing(ttl=1.0, heartbeat=0.3, grace=0.5, interval=0.5)


DEFAULTS = Timing(ttl=30.0, heartbeat=10.0, grace=15.0, interval=5.0)


def uniform_sum_cdf(x: float, w1: float, w2: float) -> float:
    """P(U(0, w1) + U(0, w2) <= x)."""
    w1, w2 = sorted((w1, w2))
    if x <= 0:
        return 0.0
    if x < w1:
        return x * x / (2 * w1 * w2)
    if x < w2:
        return (2 * x - w1) / (2 * w2)
    if x < w1 + w2:
        return 1 - (w1 + w2 - x) ** 2 / (2 * w1 * w2)
    return 1.0


def analytic(timing: Timing, grid: bool) -> dict[str, float]:
    """Quantiles of D = (TTL - heartbeat) + U(0, heartbeat) + U(0, interval) + grace'."""
    grace = timing.grace
    if grid:  # fixed-period passes (Celery beat): the judging pass is on the interval grid
        grace = -(-timing.grace // timing.interval) * timing.interval
    base = timing.ttl - timing.heartbeat + grace

    def quantile(q: float) -> float:
        low, high = 0.0, timing.heartbeat + timing.interval
        for _ in range(60):
            mid = (low + high) / 2
            if uniform_sum_cdf(mid, timing.heartbeat, timing.interval) < q:
                low = mid
            else:
                high = mid
        return base + high

    return {
        "min": round(base, 3),
        "p50": round(quantile(0.5), 3),
        "p90": round(quantile(0.9), 3),
        "p99": round(quantile(0.99), 3),
        "max": round(base + timing.heartbeat + timing.interval, 3),
        "mean": round(base + (timing.heartbeat + timing.interval) / 2, 3),
    }


def measure_detection(
    sessions: int, spread: float, server: RedisServer, tmp: Path
) -> dict[str, Any]:
    """Kill ``sessions`` heartbeat-kept sessions at random moments; time kill -> SESSION_LOST."""
    url = f"sqlite:///{tmp / 'detection.sqlite3'}"
    settings = Settings.model_validate(
        {
            "database_url": url,
            "redis_url": server.url(0),
            "redis_namespace": "detection",
            "lease_ttl_seconds": SCALED.ttl,
            "heartbeat_seconds": SCALED.heartbeat,
            "lost_grace_seconds": SCALED.grace,
            "reconcile_interval_seconds": SCALED.interval,
        }
    )
    sh = Surehand(settings=settings)
    sh.store.ensure_schema()
    beats: dict[str, tuple[Heartbeat, str]] = {}
    ttl_ms = int(SCALED.ttl * 1000)
    for n in range(sessions):
        task_id = sh.write_task(
            sender="PM", recipient="DEV", subject=f"detect {n}", body="x"
        ).task_id
        assert task_id is not None
        session = claim(sh.services, task_id, worker="bench", message_id=None)
        assert session is not None
        attempt_id = session.attempt.attempt_id
        assert sh.leases.acquire(task_id, attempt_id, ttl_ms)
        beat = Heartbeat(sh.leases, task_id, attempt_id, ttl_ms, interval=SCALED.heartbeat)
        beat.start()
        beats[task_id] = (beat, attempt_id)
    stop = threading.Event()
    loop = threading.Thread(
        target=reconcile_loop, args=(sh.reconciler, stop, SCALED.interval), daemon=True
    )
    loop.start()
    time.sleep(2 * SCALED.interval)  # let the loop settle into its rhythm
    killed: dict[str, datetime] = {}
    order = list(beats)
    moments = sorted(random.uniform(0, spread) for _ in order)
    start = time.monotonic()
    for task_id, moment in zip(order, moments, strict=True):
        time.sleep(max(0.0, start + moment - time.monotonic()))
        beat, _ = beats[task_id]
        beat.stop(timeout=0)  # the process "dies": no more renewals, no release
        killed[task_id] = datetime.now(UTC)
    deadline = time.monotonic() + spread + 10 * (SCALED.ttl + SCALED.grace + SCALED.interval)
    latencies: list[float] = []
    while time.monotonic() < deadline:
        latencies = []
        for task_id, killed_at in killed.items():
            attempt = sh.attempts(task_id)[0]
            if attempt.state is AttemptState.SESSION_LOST and attempt.ended_at is not None:
                latencies.append((attempt.ended_at - killed_at).total_seconds())
        if len(latencies) == len(killed):
            break
        time.sleep(0.25)
    stop.set()
    loop.join(10)
    sh.close()
    return {"sessions": sessions, "kills_spread_seconds": spread, **latency_summary(latencies)}


def latency_summary(latencies: Sequence[float]) -> dict[str, Any]:
    """How many were detected, and their quantiles (nearest rank), in seconds."""
    ordered = sorted(latencies)
    if not ordered:
        return {"detected": 0}

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "detected": len(ordered),
        "min": round(ordered[0], 3),
        "p50": pick(0.5),
        "p90": pick(0.9),
        "p99": pick(0.99),
        "max": round(ordered[-1], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


KILL_DATABASE = "surehand_bench_kills"


KILL_WORKERS = 3


KILL_WINDOW = 1.0  # seconds: the random delay before a kill, over three heartbeats


SLACK = 1.0  # the judging pass, its ``inspect active`` wait, beat's jitter


AGENT_SLEEP_SECONDS = 600.0


def sleeping_agent(ctx: SessionContext) -> str:
    """The agent of (c): works (sleeps) until its session ends. Workers load it as
    ``bench.sessions.reconcile_detection:sleeping_agent`` (``PYTHONPATH`` the repository)."""
    ctx.wait_cancelled(AGENT_SLEEP_SECONDS)
    return "slept"


def model_bound(timing: Timing) -> float:
    """Kill -> SESSION_LOST at most: TTL + grace + reconcile interval + slack."""
    return timing.ttl + timing.grace + timing.interval + SLACK


@dataclass
class KillDeployment:
    """Real ``surehand worker`` and ``surehand beat`` processes, each in its own group."""

    tmp: Path
    env: dict[str, str]
    dev: list[subprocess.Popen[bytes]] = field(default_factory=list)
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)

    @classmethod
    def start(cls, tmp: Path, database_url: str, server: RedisServer) -> KillDeployment:
        agent = "bench.sessions.reconcile_detection:sleeping_agent"
        env = {
            "SUREHAND_DATABASE_URL": database_url,
            "SUREHAND_BROKER_URL": server.url(2),
            "SUREHAND_REDIS_URL": server.url(3),
            "SUREHAND_AGENTS": f"DEV={agent},OPS={agent}",
            "SUREHAND_LEASE_TTL_SECONDS": str(SCALED.ttl),
            "SUREHAND_HEARTBEAT_SECONDS": str(SCALED.heartbeat),
            "SUREHAND_LOST_GRACE_SECONDS": str(SCALED.grace),
            "SUREHAND_RECONCILE_INTERVAL_SECONDS": str(SCALED.interval),
            "SUREHAND_HOME": str(tmp / "home"),
            "SUREHAND_WORK_DIR": str(tmp / "sessions"),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }
        deployment = cls(tmp, env)
        started = [deployment.worker() for _ in range(KILL_WORKERS)]
        started.append(deployment.spawn("worker", "--roles", "OPS", "--concurrency", "1"))
        deployment.others.append(started[-1])
        beat = deployment.spawn("beat")
        deployment.others.append(beat)
        for process in started:
            deployment.wait_for(process, "ready.")
        deployment.wait_for(beat, "beat: Starting")
        return deployment

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"kills-{args[0]}-{len(self.logs) + 1}.log"
        process = spawn_argv([sys.executable, "-m", "surehand", *args], self.env, log, REPO).process
        self.logs[process.pid] = log
        return process

    def worker(self) -> subprocess.Popen[bytes]:
        process = self.spawn("worker", "--roles", "DEV", "--concurrency", "1")
        self.dev.append(process)
        return process

    def wait_for(self, process: subprocess.Popen[bytes], banner: str) -> None:
        wait_ready(Proc(process, self.logs[process.pid]), banner)

    def live_pids(self) -> set[int]:
        return {p.pid for p in self.dev if p.poll() is None}

    def kill(self, pid: int) -> datetime:
        """SIGKILL a DEV worker's process group; the moment it was sent (UTC)."""
        os.killpg(pid, signal.SIGKILL)
        at = datetime.now(UTC)
        [process] = [p for p in self.dev if p.pid == pid]
        process.wait(10)
        self.dev.remove(process)
        return at

    def close(self) -> None:
        for process in [*self.dev, *self.others]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def running_sessions(sh: Surehand, pids: set[int], skip: Collection[str]) -> dict[str, int]:
    """Running attempts (id -> worker pid) of live workers, except those in ``skip``."""
    with sh.store.snapshot() as connection:
        found = attempts.running(connection)
    # ``worker`` is host:pid:thread (runner.worker_identity); threads run in the worker's pid.
    by_pid = {a.attempt_id: int(a.worker.split(":")[1]) for a in found}
    return {a: pid for a, pid in by_pid.items() if pid in pids and a not in skip}


def kill_sessions(
    sh: Surehand, deployment: KillDeployment, kills: int, rng: random.Random
) -> dict[str, datetime]:
    """SIGKILL ``kills`` workers, each at a random moment of a running session; attempt id ->
    the moment its worker was killed."""
    killed: dict[str, datetime] = {}
    deadline = time.monotonic() + 60 + 15 * kills
    while len(killed) < kills and time.monotonic() < deadline:
        running = running_sessions(sh, deployment.live_pids(), killed)
        if not running:
            time.sleep(0.05)
            continue
        attempt_id, pid = rng.choice(sorted(running.items()))
        time.sleep(rng.uniform(0, KILL_WINDOW))
        killed[attempt_id] = deployment.kill(pid)
        # The replacement is ready before the next kill: three workers serve throughout.
        deployment.wait_for(deployment.worker(), "ready.")
        console.log(f"kill {len(killed)}/{kills}: worker {pid} (attempt {attempt_id[:8]})")
    return killed


def wait_for_losses(sh: Surehand, killed: dict[str, datetime], timeout: float) -> list[float]:
    """Seconds from each kill to its attempt's ``SESSION_LOST`` (those seen within timeout)."""
    deadline = time.monotonic() + timeout
    latencies: dict[str, float] = {}
    while len(latencies) < len(killed) and time.monotonic() < deadline:
        with sh.store.snapshot() as connection:
            for attempt_id, killed_at in killed.items():
                attempt = attempts.get(connection, attempt_id)
                if attempt and attempt.state is AttemptState.SESSION_LOST and attempt.ended_at:
                    latencies[attempt_id] = (attempt.ended_at - killed_at).total_seconds()
        time.sleep(0.2)
    return list(latencies.values())


@contextmanager
def kill_store(tmp: Path, admin_url: str, postgres: bool) -> Iterator[str]:
    """A migrated store's URL, for the bench's handle and the deployment's processes."""
    if postgres:
        with postgres_store(admin_url, KILL_DATABASE) as url:
            migrate(url)
            yield url
        return
    url = f"sqlite:///{tmp / 'kills.sqlite3'}"
    migrate(url)
    yield url


def migrate(url: str) -> None:
    store = Store(url, auto_upgrade=True)
    store.ensure_schema()
    store.dispose()


def measure_real_kills(
    kills: int, server: RedisServer, tmp: Path, admin_url: str, postgres: bool
) -> dict[str, Any]:
    """Kill ``kills`` real workers mid-session; time kill -> SESSION_LOST (see (c))."""
    with kill_store(tmp, admin_url, postgres) as url:
        settings = Settings.model_validate(
            {"database_url": url, "redis_url": server.url(3), "broker_url": server.url(2)}
        )
        sh = Surehand(settings=settings)
        sh.store.ensure_schema()
        deployment = KillDeployment.start(tmp, url, server)
        try:
            for n in range(kills + KILL_WORKERS):
                sh.write_task(sender="PM", recipient="DEV", subject=f"sleep {n}", body="Sleep.")
            killed = kill_sessions(sh, deployment, kills, random.Random())
            latencies = wait_for_losses(sh, killed, timeout=10 * model_bound(SCALED))
        finally:
            deployment.close()
            sh.close()
    return {
        "kills": len(killed),
        "database": "postgres" if postgres else "sqlite",
        "workers": KILL_WORKERS,
        "reconciler": "surehand beat + surehand worker --roles OPS",
        "model_bound_seconds": model_bound(SCALED),
        **latency_summary(latencies),
    }
