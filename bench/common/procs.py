"""Process helpers shared by the benchmarks: stopping a started process group, what a process
and its children used (from ``/proc``), the machine. Starting one is ``tests.procs``'s
(``bench/common/services.py``)."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parents[2]


def stop_group(process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM the process group ``process`` leads (started with ``start_new_session``), then
    SIGKILL it if it is still there after ``timeout`` seconds."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        os.killpg(process.pid, signal.SIGCONT)  # a stopped group handles SIGTERM once continued
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def exit_on_sigterm() -> None:
    """SIGTERM ends this bench like Ctrl-C would: its ``finally`` blocks stop what it started
    (a background job ignores SIGINT, so SIGTERM is how one is stopped)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def git(*args: str) -> str:
    """``git ARGS`` in this repository: its output, stripped ("" if git failed)."""
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def versions(*names: str) -> dict[str, str]:
    """The installed version of each package of ``names`` (those not installed left out)."""
    found = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def machine(**extra: Any) -> dict[str, Any]:
    """Platform, Python, CPU count and load average now, plus ``extra``."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        **extra,
    }


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0  # it ended meanwhile
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (none if it is gone)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, breadth first."""
    out, todo = [], children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        todo += children(child)
    return out
