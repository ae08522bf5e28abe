"""What the Postgres parts of ``bench/scale/run.py`` start: a fresh database of their own, a
private ``redis-server``, a facade on them, and ``surehand worker`` processes on it, started by
``tests.procs`` and ready once their log says so (``held`` and ``pg_latency`` share it)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common.databases import fresh_database
from bench.common.services import RedisServer, spawn_argv, wait_ready
from bench.scale.probes import REPO

LATENCY_DATABASE = "surehand_bench_scale_latency"


@dataclass(frozen=True)
class Timing:
    """Lease and reconciler settings of one recovery run."""

    lease_ttl: float
    heartbeat: float
    reconcile: float
    grace: float

    def settings(self) -> dict[str, float]:
        return {
            "lease_ttl_seconds": self.lease_ttl,
            "heartbeat_seconds": self.heartbeat,
            "reconcile_interval_seconds": self.reconcile,
            "lost_grace_seconds": self.grace,
        }

    def env(self) -> dict[str, str]:
        return {f"SUREHAND_{k.upper()}": str(v) for k, v in self.settings().items()}


@dataclass(frozen=True)
class Deployment:
    """What ``deployment`` starts: its scratch folder, the env of its workers, a facade on it."""

    tmp: Path
    env: dict[str, str]
    sh: Any
    server: Any


SHORT = Timing(lease_ttl=3.0, heartbeat=1.0, reconcile=1.0, grace=2.0)
DEFAULT = Timing(lease_ttl=30.0, heartbeat=10.0, reconcile=5.0, grace=15.0)


def launch(argv: list[str], env: dict[str, str], log: Path, ready: str) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group; wait until its log says ``ready``."""
    proc = spawn_argv(argv, {"PYTHONPATH": str(REPO), **env}, log)
    wait_ready(proc, ready)
    return proc.process


def surehand_worker(
    tmp: Path, env: dict[str, str], name: str, concurrency: int, roles: str
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "surehand", "worker", "--roles", roles]
    argv += ["--concurrency", str(concurrency), "--hostname", f"{name}@%h"]
    return launch(argv, env, tmp / f"{name}.log", "ready.")


@contextmanager
def deployment(
    admin_url: str, agents: str, timing: Timing | None = None, database: str = LATENCY_DATABASE
) -> Iterator[Deployment]:
    """A fresh Postgres database, a private Redis and a facade on them; yields a namespace."""
    from surehand.config import Settings
    from surehand.facade import Surehand
    from surehand.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="surehand-scale-latency-"))
    server = RedisServer(tmp)
    url = fresh_database(admin_url, database).render_as_string(hide_password=False)
    store = Store(url, auto_upgrade=True)
    store.upgrade()
    store.dispose()
    extra = timing.settings() if timing else {}
    env = {
        "SUREHAND_DATABASE_URL": url,
        "SUREHAND_BROKER_URL": server.url(0),
        "SUREHAND_REDIS_URL": server.url(1),
        "SUREHAND_AGENTS": agents,
        "SUREHAND_HOME": str(tmp / "home"),
        "SUREHAND_WORK_DIR": str(tmp / "sessions"),
        "BENCH_SCALE_STAMPS": str(tmp / "stamps.jsonl"),
        **(timing.env() if timing else {}),
    }
    settings = Settings.model_validate(
        {"database_url": url, "redis_url": server.url(1), "broker_url": server.url(0), **extra}
    )
    sh = Surehand(settings=settings)
    try:
        yield Deployment(tmp=tmp, env=env, sh=sh, server=server)
    finally:
        sh.close()
        server.stop()
