"""A private ``redis-server`` for the benchmarks: the tests' own (``tests/procs.py``), with the
counters a benchmark reads. No persistence, never the shared Redis.

``bench/sessions.py``, ``bench/reconcile.py`` and the HTTP and scale benches start one each; it
reports the commands and the CPU time the server used, so a benchmark can count them per
operation. Starting, stopping and finding a port are ``tests.procs``'s: one helper for private
services (it needs the dev extras, as the suite does).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # a bench runs as a script: bench/ is its path, not the repository
    sys.path.insert(0, str(REPO))

from tests import procs  # noqa: E402

free_port = procs.free_port


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; raise TimeoutError after ``timeout`` seconds (a bench
    is not a test: ``tests.procs.wait_until`` fails the test instead)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class RedisServer:
    """``tests.procs.RedisServer``, started, with a client and per-database URLs."""

    def __init__(self, directory: Path) -> None:
        self.server = procs.RedisServer(directory)
        self.server.start()
        self.port = self.server.port
        self.client = redis.Redis(port=self.port, decode_responses=True)

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
        self.server.stop()
