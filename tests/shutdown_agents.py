"""An agent for ``test_cli_shutdown.py``: its session runs until the test releases it.

``surehand up`` loads it with ``SUREHAND_AGENTS=DEV=tests.shutdown_agents:held`` (started from
the repository root); the session returns once the file named by ``SHUTDOWN_RELEASE`` exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from surehand.agents.context import SessionContext

RELEASE_ENV = "SHUTDOWN_RELEASE"


def held(ctx: SessionContext) -> str:
    """Wait (at most a minute) for the release file, then report."""
    release = Path(os.environ[RELEASE_ENV])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return f"released {ctx.task.task_id}"
