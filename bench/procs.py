"""Process helpers shared by the benchmarks: stopping a started process group, the machine."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
from typing import Any


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


def machine(**extra: Any) -> dict[str, Any]:
    """Platform, Python, CPU count and load average now, plus ``extra``."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        **extra,
    }
