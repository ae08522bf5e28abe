"""What a held run's worker uses, read from ``/proc`` and Redis while its sessions are held:
memory and threads by process name (RSS and PSS), and the heartbeat's lateness sampled from the
lease keys' ``PTTL`` (``held.py`` measures with these)."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

from bench.common.procs import descendants
from bench.scale.probes import percentile


def name_of(pid: int) -> str:
    """The process's command name (``comm``), or "gone"."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def by_name(pids: list[int]) -> dict[str, dict[str, float]]:
    """Descendants grouped by command name: how many, summed RSS and PSS (MiB)."""
    out: dict[str, dict[str, float]] = {}
    for pid in pids:
        used, entry = (
            usage(pid),
            out.setdefault(name_of(pid), {"n": 0, "rss_mib": 0.0, "pss_mib": 0.0}),
        )
        entry["n"] += 1
        entry["rss_mib"] = round(entry["rss_mib"] + used["rss_kib"] / 1024, 1)
        entry["pss_mib"] = round(entry["pss_mib"] + used["pss_kib"] / 1024, 1)
    return out


def usage(pid: int) -> dict[str, int]:
    """RSS and PSS (KiB) and threads of one process; zeros if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return {"rss_kib": 0, "pss_kib": 0, "threads": 0}
    fields = dict(line.split(":", 1) for line in status.splitlines())
    pss = next(line.split()[1] for line in rollup.splitlines() if line.startswith("Pss:"))
    return {
        "rss_kib": int(fields["VmRSS"].split()[0]),
        "pss_kib": int(pss),
        "threads": int(fields["Threads"]),
    }


def tree_usage(pid: int) -> dict[str, int]:
    """The worker process's usage and its descendants' summed (``children_*``)."""
    own = usage(pid)
    below = [usage(child) for child in descendants(pid)]
    total = {key: sum(part[key] for part in below) for key in own}
    return {**own, **{f"children_{key}": value for key, value in total.items()}} | {
        "children": len(below)
    }


class LeaseSampler:
    """Samples the PTTL of every lease key in one pipeline every ``every`` seconds; infers
    when each key was last set (acquired or renewed)."""

    def __init__(self, client: Any, keys: list[str], ttl_ms: int, every: float) -> None:
        self.client, self.keys, self.ttl_ms, self.every = client, keys, ttl_ms, every
        self.sets: dict[str, list[float]] = {key: [] for key in keys}
        self.errors: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lease-sampler", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            pipe = self.client.pipeline(transaction=False)
            for key in self.keys:
                pipe.pttl(key)
            before = time.time()
            values = pipe.execute()
            after = time.time()
            self.errors.append((after - before) / 2)
            for key, left in zip(self.keys, values, strict=True):
                self._note(key, (before + after) / 2 - (self.ttl_ms - int(left)) / 1000, left)

    def _note(self, key: str, at: float, left: int) -> None:
        if left < 0:  # not acquired yet (-2) or released
            return
        seen = self.sets[key]
        if not seen or at - seen[-1] > self.every:  # a new set, not the same one sampled again
            seen.append(at)

    def jitter(self, heartbeat: float) -> dict[str, Any]:
        """The intervals between consecutive sets of each key, and their lateness."""
        intervals = [b - a for seen in self.sets.values() for a, b in itertools.pairwise(seen)]
        late = [(interval - heartbeat) * 1000 for interval in intervals]

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value, 1)

        return {
            "heartbeat_seconds": heartbeat,
            "intervals": len(intervals),
            "keys_renewed": sum(1 for seen in self.sets.values() if len(seen) > 1),
            "interval_p50_s": None if not intervals else round(percentile(intervals, 0.5) or 0, 3),
            "lateness_p50_ms": ms(percentile(late, 0.5)),
            "lateness_p99_ms": ms(percentile(late, 0.99)),
            "lateness_max_ms": ms(max(late)) if late else None,
            "lateness_min_ms": ms(min(late)) if late else None,
            "over_1s": sum(1 for value in late if value > 1000),
            "sample_error_ms_max": ms(max(self.errors) * 1000) if self.errors else None,
        }
