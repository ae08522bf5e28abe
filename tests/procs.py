"""Real processes for integration tests: a private redis-server, ``surehand`` workers, waits.
The benchmarks start their private services with these too (``bench/common/services.py``).

Each integration test that needs a broker gets its own ``redis-server`` on a free loopback port,
so tests never share queues (or disturb the shared Redis), and a test may stop and restart it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.skips import missing

SUREHAND = [sys.executable, "-m", "surehand"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def poll(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds have passed (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def wait_until(
    predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05, what: str = ""
) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds."""
    if not poll(predicate, timeout=timeout, interval=interval):
        pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")


@dataclass
class RedisServer:
    """A private ``redis-server`` (no persistence) that tests may stop and start again."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    password: str | None = None  # --requirepass, and in the URL

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing("redis-server (apt-get install redis-server)")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2)
        wait_until(lambda: _pings(client), timeout=10, what="redis-server to start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@contextmanager
def private_redis(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Proc:
    """A ``surehand`` subprocess with its log file."""

    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
        self.process.wait(timeout=30)

    @property
    def returncode(self) -> int | None:
        return self.process.poll()


def spawn_argv(
    argv: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path | None = None
) -> Proc:
    """Start ``argv`` in its own process group with ``env`` added, its output in ``log``."""
    with log.open("wb") as handle:  # the child writes to its own copy of the descriptor
        process = subprocess.Popen(
            list(argv),
            env={**os.environ, **env},
            cwd=cwd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(process, log)


def spawn(
    args: list[str], env: Mapping[str, str], log: Path, surehand: Sequence[str] = SUREHAND
) -> Proc:
    """Start ``python -m surehand ARGS`` (or ``surehand``: another installation's command)
    in its own process group with ``env`` added."""
    return spawn_argv([*surehand, *args], {**env, "PYTHONUNBUFFERED": "1"}, log)


def start_worker(
    env: Mapping[str, str],
    log: Path,
    roles: str = "DEV",
    concurrency: int = 2,
    surehand: Sequence[str] = SUREHAND,
) -> Proc:
    """Start ``surehand worker`` and wait until Celery says it is ready."""
    args = ["worker", "--roles", roles, "--concurrency", str(concurrency)]
    proc = spawn(args, env, log, surehand)
    wait_until(
        lambda: "ready." in proc.output() or proc.returncode is not None,
        timeout=60,
        what="the worker to be ready",
    )
    if proc.returncode is not None:
        pytest.fail(f"worker exited with {proc.returncode}:\n{proc.output()[-3000:]}")
    return proc


@contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.kill()


# How many times this process terminated a database's backends: the store fixture replaces
# its pools after one (tests/conftest.py), as a pooled connection killed then fails whichever
# later test checks it out.
TERMINATIONS = [0]


def terminate_backends(database_url: str) -> int:
    """``pg_terminate_backend`` every other connection to the database of ``database_url``
    (what a failover or an operator's kill does to the pools of every process); returns how
    many were terminated."""
    TERMINATIONS[0] += 1
    admin = create_engine(database_url, poolclass=NullPool)
    try:
        with admin.connect() as connection:
            killed = connection.execute(
                text(
                    # count(x) would count false too: only backends it did terminate.
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) AS ended "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()) AS sent WHERE ended"
                )
            ).scalar_one()
    finally:
        admin.dispose()
    return int(killed)
