"""Process helpers shared by the benchmarks: stopping a started process group, the machine."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
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


def machine(**extra: Any) -> dict[str, Any]:
    """Platform, Python, CPU count and load average now, plus ``extra``."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        **extra,
    }
