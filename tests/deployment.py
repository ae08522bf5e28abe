"""A real deployment for integration tests: ``surehand worker`` and ``surehand beat``
processes on a private ``redis-server`` (broker and leases), against the test's store.

Settings are scaled down: lease TTL 1 s, heartbeat 0.3 s, grace 0.5 s, reconcile every 0.5 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from surehand.store import Store
from tests.procs import Proc, RedisServer, spawn

REPO = Path(__file__).resolve().parent.parent


def wait_showing_logs(
    procs: Sequence[Proc], predicate: Callable[[], bool], what: str, timeout: float
) -> None:
    """Poll ``predicate``; after ``timeout`` seconds fail the test with each process's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    logs = "\n".join(f"--- {p.log.name}\n{p.output()[-2500:]}" for p in procs)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{logs}")


def start_ready(procs: list[Proc], args: list[str], env: dict[str, str], log: Path) -> Proc:
    """Start ``surehand ARGS``, keep it in ``procs`` and wait until it says it is ready
    (Celery's ``ready.``, beat's ``Starting``); fail with its log if it exits first."""
    proc = spawn(args, env, log)
    procs.append(proc)
    ready = "beat: Starting" if args[0] == "beat" else "ready."
    up = f"{log.stem} up"
    wait_showing_logs(
        procs, lambda: ready in proc.output() or proc.returncode is not None, up, 90.0
    )
    assert proc.returncode is None, proc.output()[-3000:]
    return proc


@dataclass
class Deployment:
    """Workers and one beat on a private redis-server, against the test's store."""

    tmp: Path
    store: Store
    redis: RedisServer
    env: dict[str, str]
    site: str  # the workers' hostnames are ``wN@site``
    timeout: float = 60.0  # how long ``wait`` waits by default
    procs: list[Proc] = field(default_factory=list)

    def start(self, args: list[str], **extra: str) -> Proc:
        log = self.tmp / f"{args[0]}{len(self.procs) + 1}.log"
        return start_ready(self.procs, args, {**self.env, **extra}, log)

    def worker(self, roles: str = "DEV", **extra: str) -> Proc:
        name = f"w{len(self.procs) + 1}@{self.site}"
        args = ["worker", "--roles", roles, "--concurrency", "2", "--hostname", name]
        return self.start(args, **extra)

    def beat(self) -> Proc:
        return self.start(["beat", "--loglevel", "info"])

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        wait_showing_logs(self.procs, predicate, what, timeout or self.timeout)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()


@contextmanager
def deployed(store: Store, tmp_path: Path, site: str, env: dict[str, str]) -> Iterator[Deployment]:
    """A :class:`Deployment` whose processes get the scaled-down settings and ``env``
    (``SUREHAND_AGENTS`` and the agents' own settings); stopped when the block ends."""
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    settings = {
        "SUREHAND_DATABASE_URL": store.url,
        "SUREHAND_REDIS_URL": redis.url,
        "SUREHAND_BROKER_URL": redis.url,
        "SUREHAND_LEASE_TTL_SECONDS": "1.0",
        "SUREHAND_HEARTBEAT_SECONDS": "0.3",
        "SUREHAND_LOST_GRACE_SECONDS": "0.5",
        "SUREHAND_RECONCILE_INTERVAL_SECONDS": "0.5",
        "SUREHAND_HOME": str(tmp_path / "home"),
        "SUREHAND_WORK_DIR": str(tmp_path / "work"),
        "PYTHONPATH": str(REPO),
        **env,
    }
    built = Deployment(tmp_path, store, redis, settings, site)
    try:
        yield built
    finally:
        built.close()
        redis.stop()
