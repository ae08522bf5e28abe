"""What other test modules need from ``tests/processes/test_cancel_workers.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand.store import Store
from tests.agent_procs import wait_for_processes
from tests.procs import Proc, RedisServer, wait_until
from tests.shared.workers import worker_env

# Starts a grandchild that ignores SIGTERM and SIGHUP, marks itself started, then sleeps.
TREE_AGENT = """\
sh -c "trap '' TERM HUP; sleep $AGENT_MARK" &
touch "$AGENT_TEST_DIR/started"
sleep "$AGENT_MARK"
echo finished
"""


def agent_env(
    store: Store, broker: RedisServer, tmp_path: Path, script: str, mark: str, **extra: str
) -> dict[str, str]:
    path = tmp_path / "agent.sh"
    path.write_text(script, encoding="utf-8")
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=f"sh {path}",
        AGENT_TEST_DIR=str(tmp_path),
        AGENT_MARK=mark,
        **extra,
    )


def wait_started(tmp_path: Path, worker: Proc, mark: str) -> None:
    def started() -> bool:
        if worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
        return (tmp_path / "started").exists()

    wait_until(started, timeout=60, what="the command agent to start")
    wait_for_processes(mark)
