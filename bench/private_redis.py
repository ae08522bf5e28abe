"""A private ``redis-server`` for the benchmarks: no persistence, never the shared Redis.

``bench/sessions.py`` and ``bench/reconcile.py`` start one each; it reports the commands and
the CPU time the server used, so a benchmark can count them per operation.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class RedisServer:
    """A private redis-server without persistence."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed")
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                *(binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""),
                *("--appendonly", "no", "--dir", str(directory)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = redis.Redis(port=self.port, decode_responses=True)
        wait_for(self._pings, 10, "redis-server")

    def _pings(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def commandstats(self) -> Counter[str]:
        info: dict[str, Any] = self.client.info("commandstats")
        return Counter(
            {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}
        )

    def cpu_seconds(self) -> float:
        info: dict[str, Any] = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def stop(self) -> None:
        self.client.close()
        self.process.kill()
        self.process.wait()
