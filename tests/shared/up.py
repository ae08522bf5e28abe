"""What other test modules need from ``tests/processes/test_up.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.procs import SUREHAND, Proc, spawn, wait_until


def env_for(home: Path) -> dict[str, str]:
    return {"SUREHAND_HOME": str(home), "SUREHAND_API_PORT": "0"}


def run(args: list[str], home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        SUREHAND + args,
        env={**os.environ, **env_for(home)},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def events(proc: Proc) -> list[dict[str, Any]]:
    found = []
    for line in proc.output().splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def start_up(
    home: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[Proc, dict[str, Any]]:
    log = home / f"up-{len(list(home.glob('up*.log')))}.log"
    proc = spawn(["up", "--json", *extra], {**env_for(home), **(env or {})}, log)

    def ready() -> bool:
        return proc.returncode is not None or any(e.get("event") == "ready" for e in events(proc))

    wait_until(ready, timeout=60, what="surehand up to be ready")
    assert proc.returncode is None, proc.output()
    return proc, next(e for e in events(proc) if e.get("event") == "ready")


def stop(proc: Proc, sig: int) -> int:
    os.killpg(proc.process.pid, sig)
    return proc.process.wait(timeout=60)
