"""Stamps the benchmarks' agents write from worker processes: one JSON line each,
``{"task": id, "what": ..., "at": unix seconds}``, appended to a file the bench reads back."""

from __future__ import annotations

import json
import os
import time


def append_stamp(path: str, task: str, what: str, at: float | None = None) -> None:
    """Append one stamp to ``path`` with a single ``write`` (``O_APPEND``), so that concurrent
    writers, threads or processes, do not interleave."""
    line = json.dumps({"task": task, "what": what, "at": time.time() if at is None else at})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
