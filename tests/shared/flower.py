"""What other test modules need from ``tests/processes/test_flower.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.procs import Proc, free_port, spawn, wait_until


def start_flower(env: Mapping[str, str], log: Path) -> tuple[Proc, str]:
    port = free_port()
    proc = spawn(["flower", "--port", str(port)], env, log)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.returncode is not None or "Connected to redis" not in proc.output():
            return proc.returncode is not None
        try:
            return httpx.get(f"{url}/healthcheck", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, timeout=60, interval=0.2, what="Flower to start")
    assert proc.returncode is None, proc.output()
    return proc, url
