"""What the parts of ``bench/scale/`` share: the stamps file the agents of ``agents.py`` append
to, percentiles, one probe TASK's start latencies, and load offered at a steady rate."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common.stats import nearest_rank

REPO = Path(__file__).resolve().parents[2]
AGENTS_MODULE = "bench.scale.agents"  # the workers' agents, with PYTHONPATH the repository


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; None if empty."""
    return nearest_rank(values, q) if values else None


def latency(values: list[float]) -> dict[str, Any]:
    """Count, p50 and p99 of latencies in seconds, as milliseconds."""
    p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
    return {
        "n": len(values),
        "p50_ms": None if p50 is None else round(p50 * 1000, 2),
        "p99_ms": None if p99 is None else round(p99 * 1000, 2),
    }


class Stamps:
    """The stamps file the agents append to, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: dict[tuple[str, str], float] = {}
        self._offset = 0

    def read(self) -> dict[tuple[str, str], float]:
        if self.path.exists():
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offset += len(complete)
            for line in complete.splitlines():
                stamp = json.loads(line)
                self.seen[(stamp["task"], stamp["what"])] = float(stamp["at"])
        return self.seen

    def wait(self, task: str, what: str, timeout: float = 30.0) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.read().get((task, what))
            if found is not None:
                return found
            time.sleep(0.0005)
        return None

    def count(self, what: str) -> int:
        return sum(1 for _, kind in self.read() if kind == what)


def probe_once(runtime: Any, stamps: Stamps, into: dict[str, list[float]]) -> None:
    """Submit one probe TASK; add its submit -> running and submit -> effect latencies."""
    submitted = time.time()
    task_id = str(runtime.sh.write_task(sender="PM", recipient="QA", subject="probe").task_id)
    for what in ("running", "effect"):
        at = stamps.wait(task_id, what)
        if at is not None:
            into[what].append(at - submitted)


def offer_paced(
    rate: float, offer: Callable[[int], None], stop: threading.Event, window: float = math.inf
) -> int:
    """Call ``offer(n)`` for n = 0, 1, ... at ``rate`` a second until ``stop`` is set or
    ``window`` seconds have passed; how many were offered."""
    started, offered = time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - started < window:
        due = started + offered / rate
        if due > time.monotonic():
            stop.wait(due - time.monotonic())
        offer(offered)
        offered += 1
    return offered
