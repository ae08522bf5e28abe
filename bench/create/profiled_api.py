"""``surehand api`` with every thread under cProfile, timed by each thread's own CPU clock.

    python bench/create/profiled_api.py OUT.json api [surehand api options...]

Used by ``bench/create/http_profile.py``. Each thread (the event loop, the request threads, the
outbox publisher) gets a ``cProfile.Profile`` timed by ``time.thread_time``, so its numbers are that
thread's CPU, not wall time spent waiting on Postgres or Redis. On SIGUSR1 it writes, per
thread name, the thread's total CPU and its functions' own and cumulative CPU to OUT.json,
cumulative since the start (the driver subtracts a dump taken after its warm-up). Not a test.
"""

from __future__ import annotations

import cProfile
import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

_profiles: list[tuple[str, cProfile.Profile]] = []
_lock = threading.Lock()


def _new_profile() -> cProfile.Profile:
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append((threading.current_thread().name, profile))
    return profile


def _start_in_thread(frame: FrameType, event: str, arg: Any) -> None:
    # A new thread's first profile event: replace this hook with the thread's own profiler.
    _new_profile().enable()


def _label(code: Any) -> str:
    if isinstance(code, str):  # a built-in function
        return code
    return f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"


def _rows(profile: cProfile.Profile) -> dict[str, tuple[float, float, int]]:
    """Own CPU, cumulative CPU and calls per function. ``getstats`` reads a profile another
    thread is filling without disabling it (``pstats`` would disable it, and this thread's)."""
    rows: dict[str, tuple[float, float, int]] = {}
    for entry in profile.getstats():
        key = _label(entry.code)
        was = rows.get(key, (0.0, 0.0, 0))
        rows[key] = (was[0] + entry.inlinetime, was[1] + entry.totaltime, was[2] + entry.callcount)
    return rows


def _dump(path: Path) -> None:
    threads: dict[str, dict[str, Any]] = {}
    with _lock:
        profiles = list(_profiles)
    for name, profile in profiles:
        group = "AnyIO worker" if name.startswith("AnyIO worker") else name
        entry = threads.setdefault(group, {"threads": 0, "functions": {}})
        entry["threads"] += 1
        for key, (own, cumulative, calls) in _rows(profile).items():
            was = entry["functions"].get(key, (0.0, 0.0, 0))
            entry["functions"][key] = (was[0] + own, was[1] + cumulative, was[2] + calls)
    for entry in threads.values():
        entry["cpu_seconds"] = sum(own for own, _, _ in entry["functions"].values())
    path.write_text(json.dumps(threads), encoding="utf-8")


def main() -> None:
    # This tree's surehand, not the one the interpreter's environment installed.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    out = Path(sys.argv[1])
    signal.signal(signal.SIGUSR1, lambda *_: _dump(out))
    threading.setprofile(_start_in_thread)
    from surehand.cli import main as surehand_main

    _new_profile().enable()
    sys.argv = ["surehand", *sys.argv[2:]]
    surehand_main()


if __name__ == "__main__":
    main()
