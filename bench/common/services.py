"""A private ``redis-server`` for the benchmarks: the tests' own (``tests/procs.py``), with the
counters a benchmark reads. No persistence, never the shared Redis.

Starting, stopping, finding a free port and polling are ``tests.procs``'s: one helper for
private services, used by the suite and the benches alike (it needs the dev extras, as the suite
does). What is added here is what only a benchmark reads: the commands and the CPU time the
server used, so that it can count them per operation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from tests import procs
from tests.procs import Proc, free_port, spawn_argv

__all__ = ["Proc", "RedisServer", "free_port", "spawn_argv", "wait_for", "wait_ready"]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """``tests.procs.poll`` that raises TimeoutError after ``timeout`` seconds (a bench is not a
    test: ``tests.procs.wait_until`` fails the test instead)."""
    if not procs.poll(predicate, timeout=timeout, interval=0.02):
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_ready(proc: Proc, banner: str, timeout: float = 120) -> None:
    """Wait until ``banner`` is in ``proc``'s log; RuntimeError (with the log's tail) if it
    exits first, TimeoutError if ``timeout`` seconds pass."""

    def ready() -> bool:
        if proc.returncode is not None:
            raise RuntimeError(f"pid {proc.process.pid} exited:\n{proc.output()[-3000:]}")
        return banner in proc.output()

    wait_for(ready, timeout, f"{banner!r} from pid {proc.process.pid}")


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
